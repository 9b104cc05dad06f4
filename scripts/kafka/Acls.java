// Acls.java - grants the dev stack's ACLs (scripts/stack.sh with STRAND_KAFKA_SASL=1).
// Run as a single-file program with the broker's jars on the class path:
//   java -cp 'lib/*' Acls.java <bootstrap> <admin client properties> <topic prefix>
//        <service principal> <app principal>
// The service principal (Strand's services) may create, describe, read and write every
// topic and use every consumer group whose name starts with the prefix. The app
// principal (applications) may only produce to <prefix>ingress, consume
// <prefix>notices and <prefix>work, and use consumer groups named <prefix>app.*.
// Creating an ACL that exists is a no-op, so this is idempotent. The same bindings are
// listed in docs/operations.md ("Kafka security") for a production cluster.
import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class Acls {
    static void allow(List<AclBinding> out, ResourceType type, String name, PatternType pattern,
                      String principal, AclOperation... ops) {
        for (AclOperation op : ops)
            out.add(new AclBinding(new ResourcePattern(type, name, pattern),
                    new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)));
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: Acls <bootstrap> <properties> <prefix> <service principal> <app principal>");
            System.exit(2);
        }
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            props.load(in);
        }
        props.put("bootstrap.servers", args[0]);
        String prefix = args[2], service = args[3], app = args[4];
        List<AclBinding> acls = new ArrayList<>();
        allow(acls, ResourceType.TOPIC, prefix, PatternType.PREFIXED, service, AclOperation.CREATE,
              AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.READ, AclOperation.WRITE);
        allow(acls, ResourceType.GROUP, prefix, PatternType.PREFIXED, service, AclOperation.READ,
              AclOperation.DESCRIBE);
        allow(acls, ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, service,
              AclOperation.IDEMPOTENT_WRITE);
        allow(acls, ResourceType.TOPIC, prefix + "ingress", PatternType.LITERAL, app,
              AclOperation.WRITE, AclOperation.DESCRIBE);
        for (String t : new String[] {"notices", "work"})
            allow(acls, ResourceType.TOPIC, prefix + t, PatternType.LITERAL, app, AclOperation.READ,
                  AclOperation.DESCRIBE);
        allow(acls, ResourceType.GROUP, prefix + "app.", PatternType.PREFIXED, app, AclOperation.READ,
              AclOperation.DESCRIBE);
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(acls).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("acls: " + acls.size() + " bindings for " + service + " and " + app
                           + " on prefix " + prefix);
    }
}
