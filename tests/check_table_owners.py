#!/usr/bin/env python3
"""check_table_owners.py - one owner per table (invariant 14).

Scans the C sources under services/ and libs/ for SQL that writes a strand.* table
(INSERT INTO, UPDATE, DELETE FROM, TRUNCATE) and fails when a table listed in
tests/table_owners.txt is written outside its owner's files, when a table that is
not listed there is written at all (a new table gets its owner with its first write),
or when an owner's file is outside libs/store/ (the store layer holds every table's
owner: docs/architecture.md, "Layers").

Usage: tests/check_table_owners.py [REPO_ROOT]   exit 0 when every table is clean.
"""
import collections
import os
import re
import sys

WRITE = re.compile(r'\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?)\s+(strand\.[a-z_]+)\b',
                   re.IGNORECASE)


def load_owners(path):
    owners = {}
    with open(path) as f:
        for line in f:
            line = line.split('#', 1)[0].split()
            if line:
                owners[line[0]] = set(line[1:])
    return owners


def sources(root):
    for top in ('services', 'libs'):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(('.c', '.h')):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    owners = load_owners(os.path.join(root, 'tests', 'table_owners.txt'))
    writers = collections.defaultdict(collections.Counter)
    for rel in sources(root):
        with open(os.path.join(root, rel), errors='replace') as f:
            text = f.read()
        # SQL is written as adjacent string literals: join them so that a statement
        # split across lines is still seen whole.
        joined = re.sub(r'"\s*\n\s*"', '', text)
        for m in WRITE.finditer(joined):
            writers[m.group(2).lower()][rel] += 1
    bad = 0
    for table in sorted(owners):
        outside = sorted(f for f in owners[table] if not f.startswith('libs/store/'))
        if outside:
            bad += 1
            print(f'{table}: owned by {" ".join(outside)}, outside libs/store/: '
                  f'table owners live in the store layer')
        strays = {f: n for f, n in writers.get(table, {}).items() if f not in owners[table]}
        if strays:
            bad += 1
            for f, n in sorted(strays.items()):
                print(f'{table}: written in {f} ({n} statement(s)); its owner is '
                      f'{" ".join(sorted(owners[table]))}: move the SQL there and call it')
    print(f'owned tables: {len(owners)} ({bad} with writes outside the owner)')
    for table in sorted(set(writers) - set(owners)):
        bad += 1
        files = ', '.join(f'{f} ({n})' for f, n in sorted(writers[table].items()))
        print(f'{table} has no owner in tests/table_owners.txt; written in {files}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
