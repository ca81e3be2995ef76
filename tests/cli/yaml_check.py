#!/usr/bin/env python3
"""yaml_check.py: read a YAML stream (a file or stdin) with PyYAML's safe
loader and print its documents as one JSON array, so bats tests can check
manifests with jq. A parse error exits 1 with the loader's message."""
import json
import sys

import yaml

src = open(sys.argv[1], encoding="utf-8") if len(sys.argv) > 1 else sys.stdin
try:
    docs = [d for d in yaml.safe_load_all(src) if d is not None]
except yaml.YAMLError as e:
    print(f"yaml_check: {e}", file=sys.stderr)
    sys.exit(1)
json.dump(docs, sys.stdout, indent=1, default=str)
print()
