#!/usr/bin/env python3
"""check_layers.py - includes point downward only (docs/architecture.md, "Layers").

The libraries are layers, and their folders show it:

    services/<name>/   may include  its own folder, runtime, store, common, engine, diagram
    libs/runtime/      may include  runtime, store, common, engine
    libs/store/        may include  store, common, engine
    libs/common/       may include  common

and all but the engine and the diagram renderer the envelopes generated from proto/
("strand/proto/strand.pb-c.h");
    libs/engine/       may include  engine, and common's err.h (the error table, no I/O)
    libs/diagram/      may include  diagram, engine, and common's err.h

and what each layer may talk to is fixed too: only libs/common includes the client
libraries' headers (libpq aside, which the store and the runtime use through pg.h's
types); libs/store never includes Kafka, HTTP or libevent (kafka.h, http.h,
worker_http.h, <librdkafka/...>, <event2/...>); the engine and the diagram renderer
include no I/O library at all. A service never includes another service's files.

A header "strand/x.h" is resolved to the library whose include/strand/ holds it; a
local "x.h" to the including file's folder. Fails on an include that points upward or
sideways, on a forbidden system header, and on a "strand/x.h" that no library holds or
that two hold (one name, one owner).

Usage: tests/check_layers.py [REPO_ROOT]   exit 0 when every include is allowed.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)

LIBS = ('common', 'store', 'runtime', 'engine', 'diagram')
# What each layer may include, by library name ('self' is the including service).
ALLOWED = {
    'common': {'common', 'proto'},
    'store': {'store', 'common', 'engine', 'proto'},
    'runtime': {'runtime', 'store', 'common', 'engine', 'proto'},
    'engine': {'engine', 'common:err.h'},
    'diagram': {'diagram', 'engine', 'common:err.h'},
    'service': {'self', 'runtime', 'store', 'common', 'engine', 'diagram', 'proto'},
}
# System and adapter headers a layer must not include (prefixes of the include text).
FORBIDDEN = {
    'store': ('librdkafka/', 'event2/', 'curl/', 'strand/kafka.h', 'strand/http.h',
              'strand/worker_http.h', 'strand/service.h'),
    'engine': ('libpq-fe.h', 'librdkafka/', 'event2/', 'hiredis', 'curl/', 'openssl/'),
    'diagram': ('libpq-fe.h', 'librdkafka/', 'event2/', 'hiredis', 'curl/', 'openssl/'),
}


def layer_of(rel):
    """('common'|'store'|...|'service', service name or None) for a source path."""
    parts = rel.split(os.sep)
    if parts[0] == 'libs' and len(parts) > 1 and parts[1] in LIBS:
        return parts[1], None
    if parts[0] == 'services' and len(parts) > 2:
        return 'service', parts[1]
    return None, None


def sources(root):
    for top in ('libs', 'services'):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(('.c', '.h')):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def public_headers(root):
    """{'strand/x.h': [lib, ...]} for every library's include/strand/."""
    owners = {}
    for lib in LIBS:
        d = os.path.join(root, 'libs', lib, 'include', 'strand')
        if os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                if name.endswith('.h'):
                    owners.setdefault('strand/' + name, []).append(lib)
    return owners


def check(root):
    headers = public_headers(root)
    problems = []
    for h, libs in sorted(headers.items()):
        if len(libs) > 1:
            problems.append(f'{h} is in {" and ".join(libs)}: one header name, one library')
    files = 0
    for rel in sources(root):
        layer, service = layer_of(rel)
        if layer is None:
            continue
        files += 1
        with open(os.path.join(root, rel), errors='replace') as f:
            text = f.read()
        allowed = ALLOWED[layer]
        for m in INCLUDE.finditer(text):
            quote, name = m.group(1), m.group(2)
            line = text.count('\n', 0, m.start()) + 1
            where = f'{rel}:{line}'
            for bad in FORBIDDEN.get(layer, ()):
                if name.startswith(bad):
                    problems.append(f'{where}: includes {name}, which libs/{layer} may not '
                                    f'(see its README)')
            if quote == '<':
                continue
            if name.startswith('strand/proto/'):   # generated from proto/ at build time
                if 'proto' not in allowed:
                    problems.append(f'{where}: includes {name}; libs/{layer} may not')
                continue
            if name.startswith('strand/'):
                libs = headers.get(name)
                if not libs:
                    problems.append(f'{where}: includes {name}, which no library holds')
                    continue
                target = libs[0]
                ok = target in allowed or f'{target}:{name[7:]}' in allowed
                if not ok:
                    me = f'services/{service}' if layer == 'service' else f'libs/{layer}'
                    problems.append(f'{where}: {me} includes {name} of libs/{target}: '
                                    f'includes point downward only (services -> runtime -> '
                                    f'store -> common)')
            else:
                # A local header: it must be in the including file's folder (or below it).
                local = os.path.normpath(os.path.join(os.path.dirname(rel), name))
                if not os.path.exists(os.path.join(root, local)):
                    continue   # a system header written with quotes
                tlayer, tservice = layer_of(local)
                if tlayer != layer or tservice != service:
                    problems.append(f'{where}: includes {local} across layers')
    for p in problems:
        print(p)
    print(f'layers: {files} files checked, {len(problems)} include(s) not allowed')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else
                   os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')))
