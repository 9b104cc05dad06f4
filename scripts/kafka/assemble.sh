#!/usr/bin/env bash
# Assembles the Apache Kafka broker (KRaft mode) from Maven Central: resolves
# org.apache.kafka:kafka_2.13 and its runtime dependencies with Maven into
# $STRAND_KAFKA_HOME/lib (default .cache/kafka in the repository). Idempotent: an
# assembled directory is reused. Prints the lib directory on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
home=${STRAND_KAFKA_HOME:-$repo/.cache/kafka/$version}
if [ -f "$home/.assembled" ]; then
  echo "kafka: broker $version already assembled"
  echo "$home/lib"
  exit 0
fi
echo "kafka: resolving org.apache.kafka:kafka_2.13:$version with Maven"
rm -rf "$home/lib"
mkdir -p "$home/lib"
mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$home/lib"
ls "$home/lib"/kafka_2.13-"$version".jar >/dev/null
touch "$home/.assembled"
echo "kafka: assembled $(ls "$home/lib" | wc -l) jars"
echo "$home/lib"
