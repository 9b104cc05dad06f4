#!/usr/bin/env python3
"""check_plants.py - the structure checks fail when the structure is broken.

Copies libs/, services/ and tests/table_owners.txt of the repository into a temporary
directory, checks that tests/check_layers.py and tests/check_table_owners.py pass on
the copy as it is, then plants one violation at a time into a fresh copy and checks
that the right script fails and names the planted file. A check that passes a planted
violation is as broken as the structure it guards.

Usage: tests/check_plants.py [REPO_ROOT]   exit 0 when every plant is caught.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (what is planted, script, file to change, text appended, text the failure must show)
PLANTS = [
    ('the store includes the runtime (upward)', 'check_layers.py',
     'libs/store/src/task.c', '#include "strand/relay.h"\n', 'libs/store/src/task.c'),
    ('the adapters include the store (upward)', 'check_layers.py',
     'libs/common/src/log.c', '#include "strand/task.h"\n', 'libs/common/src/log.c'),
    ('the runtime includes a service (upward)', 'check_layers.py',
     'libs/runtime/src/tree.c', '#include "../../../services/api/api.h"\n',
     'libs/runtime/src/tree.c'),
    ('the engine includes PostgreSQL (no I/O)', 'check_layers.py',
     'libs/engine/src/interp.c', '#include <libpq-fe.h>\n', 'libs/engine/src/interp.c'),
    ('the engine includes the store', 'check_layers.py',
     'libs/engine/src/interp.c', '#include "strand/timer.h"\n', 'libs/engine/src/interp.c'),
    ('the store talks to Kafka', 'check_layers.py',
     'libs/store/src/timer.c', '#include "strand/kafka.h"\n', 'libs/store/src/timer.c'),
    ('a service includes another service', 'check_layers.py',
     'services/monitor/main.c', '#include "../api/api.h"\n', 'services/monitor/main.c'),
    ('a service writes a table it does not own', 'check_table_owners.py',
     'services/api/tasks.c',
     'static const char *planted = "UPDATE strand.tasks SET state = \'x\'";\n',
     'services/api/tasks.c'),
    ('the runtime writes a table', 'check_table_owners.py',
     'libs/runtime/src/relay.c',
     'static const char *planted = "DELETE FROM strand.outbox";\n',
     'libs/runtime/src/relay.c'),
    ('a new table written without an owner', 'check_table_owners.py',
     'libs/store/src/task.c',
     'static const char *planted = "INSERT INTO strand.planted_table VALUES (1)";\n',
     'strand.planted_table has no owner'),
    ('an owner outside libs/store', 'check_table_owners.py',
     'tests/table_owners.txt', 'strand.planted_owner services/api/tasks.c\n',
     'strand.planted_owner'),
]


def copy_tree(root, dst):
    for top in ('libs', 'services'):
        shutil.copytree(os.path.join(root, top), os.path.join(dst, top),
                        ignore=shutil.ignore_patterns('node_modules', '*.o'))
    os.makedirs(os.path.join(dst, 'tests'))
    shutil.copy(os.path.join(root, 'tests', 'table_owners.txt'), os.path.join(dst, 'tests'))


def run(script, tree):
    p = subprocess.run([sys.executable, os.path.join(HERE, script), tree],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..')
    failures = 0
    with tempfile.TemporaryDirectory(prefix='strand-plants.') as tmp:
        clean = os.path.join(tmp, 'clean')
        copy_tree(root, clean)
        for script in ('check_layers.py', 'check_table_owners.py'):
            rc, out = run(script, clean)
            if rc != 0:
                failures += 1
                print(f'FAIL {script} fails on the unplanted tree:\n{out}')
        for i, (what, script, rel, text, expect) in enumerate(PLANTS):
            tree = os.path.join(tmp, f'plant{i}')
            copy_tree(root, tree)
            with open(os.path.join(tree, rel), 'a') as f:
                f.write(text)
            rc, out = run(script, tree)
            if rc == 1 and expect in out:
                print(f'ok   {what}: {script} failed, naming {expect}')
            else:
                failures += 1
                print(f'FAIL {what}: {script} answered {rc} without naming {expect}:\n{out}')
    print(f'plants: {len(PLANTS)}, missed {failures}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
