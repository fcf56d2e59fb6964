#!/usr/bin/env python3
"""Checks HAR files with tools no one here wrote: validates each against the HAR 1.2 schema
(Python `jsonschema`) and reads it with `haralyzer`, printing one JSON line per entry as haralyzer
sees it (method, url, status, response text and its encoding).

    check-har.py FILE…     exit 0 when every file passes; 1 with the reason otherwise

Needs `python3 -m pip install jsonschema haralyzer` (.ci/run installs them).
"""
import json
import os
import sys

try:
    import jsonschema
    from haralyzer import HarParser
except ImportError as error:
    print(f"check-har: {error}: install with `python3 -m pip install jsonschema haralyzer`", file=sys.stderr)
    sys.exit(1)

schema_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "har-1.2.schema.json")
with open(schema_path, encoding="utf-8") as file:
    schema = json.load(file)

for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as error:
        print(f"check-har: {path}: not HAR 1.2: {error.message} at {list(error.absolute_path)}", file=sys.stderr)
        sys.exit(1)
    parser = HarParser(data)
    for page in parser.pages:
        for entry in page.entries:
            print(json.dumps({
                "file": os.path.basename(path),
                "method": entry.request.method,
                "url": entry.request.url,
                "status": entry.response.status,
                "text": entry.response.text,
                "encoding": entry.response.textEncoding,
            }, sort_keys=True))
