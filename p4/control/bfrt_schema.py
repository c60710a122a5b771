"""bfrt_schema.py: what bfrt_python makes of a compiled program, for checking dta_bfrt.py off the switch.

`bf-p4c` writes `bf-rt.json` next to each build (`P4_OUT=dir scripts/p4-check.sh` keeps it). On a
switch, bfrt_python (bf-drivers `src/bf_rt/bf_rt_python/bfrtcli.py`) reads that file and builds
the object tree `bfrt.<program>.<pipe>.<control>.<table>` with one method per operation. Their
keyword parameters are derived from the field names, not copied: this module states those rules
(`param_names`) and reduces a `bf-rt.json` to the little the control plane needs (`reduce`), so
that the reduced files under `p4/control/bfrt/` can be committed and `strict_bfrt.StrictBfrt`
can reject every call the real shell would reject or silently mis-program.

    python3 p4/control/bfrt_schema.py BUILD/bf-rt.json --program dta_translator \\
        --defines="-DDTA_NO_ICRC" > p4/control/bfrt/NAME.json
    python3 p4/control/bfrt_schema.py --p4-out $P4_OUT --into p4/control/bfrt   # every build

The rules, as bfrt_python applies them (bf-drivers, open-p4studio):
  * a table's node path is its full name split at the dots ("pipe.Ingress.tbl_x");
  * `add_with_<a>` exists for every action whose scope is not DefaultOnly, `<a>` being the last
    dot component of the action's name with `$` removed;
  * a field's keyword is its name with `$` dropped and ` & `, `-`, `:`, `[`, `]` made `_`, cut
    to its last r dot components joined with `_`. r grows until the method's key fields differ
    from each other, then (from there) until its data fields (one action's, or a register's)
    differ from each other and from the key names; when that needs a deeper r, the keys are
    named again at it. A data field whose whole name equals a key's last component cannot
    grow, so r runs to its limit (21) and every key is written out whole (`hdr_ipv4_dst`);
    keywords that are Python keywords get a `key_`/`data_` prefix (`param_names`);
  * ternary keys take `<k>` and `<k>_mask`, LPM keys `<k>` and `<k>_p_length`;
  * a required field left out is written as 0 (a mask as all ones): a missing keyword is no
    error on the switch, only a wrong entry.
"""

import json
import keyword
import sys

REPLACEMENTS = (("$", ""), (" & ", "_"), ("-", "_"), (":", "_"), ("[", "_"), ("]", "_"),
                ("__", "_"))
MAX_DEPTH = 20


def _clean(name):
    for a, b in REPLACEMENTS:
        name = name.replace(a, b)
    return name


def _build(names, collide, depth):
    """One naming pass at a depth: {name: keyword}, and 0 (no collision), -1 (a collision a
    deeper pass may resolve) or -2 (a collision of a name already whole)."""
    out, status = {}, 0
    for name in names:
        p = _clean(name)
        cut = len(p)
        for _ in range(depth):
            cut = p.rfind(".", 0, cut)
            if cut == -1:
                break
        p = p[cut + 1:].replace(".", "_")
        out[name] = p
        if p in collide:
            if cut == -1:
                status = -2
            if status == 0:
                status = -1
        collide[p] = 0
    return out, status


def _names(names, collide=None, depth=1):
    """bfrt_python's search for a depth: deeper until no collision, giving up past 20 levels
    when the colliding names are whole. Returns (names, the collide set, the depth reached)."""
    status = -1
    while status < 0:
        cur = dict(collide or {})
        out, status = _build(names, cur, depth)
        if status < 0:
            depth += 1
            if depth > MAX_DEPTH and status == -2:
                break
    return out, cur, depth


def param_names(key_fields, data_fields=()):
    """{field name: keyword} for one generated method, as bfrt_python derives them: the key
    fields' depth first, then the data fields' from there against the key names; while the two
    depths differ, the keys again from the data's depth (after 50 rounds every keyword gets
    `_key`/`_data`)."""
    keys, collide, k_depth = _names(key_fields)
    data, _, d_depth = _names(data_fields, collide, k_depth)
    tries = 0
    while k_depth != d_depth:
        keys, collide, k_depth = _names(key_fields, depth=d_depth)
        data, _, d_depth = _names(data_fields, collide, k_depth)
        tries += 1
        if tries >= 50:
            keys = {n: p + "_key" for n, p in keys.items()}
            data = {n: p + "_data" for n, p in data.items()}
            break
    for n, p in keys.items():
        if keyword.iskeyword(p):
            keys[n] = "key_" + p
    for n, p in data.items():
        if keyword.iskeyword(p):
            data[n] = "data_" + p
    return {**keys, **data}


def action_method(action_name):
    """The `add_with_...` method name of an action."""
    return "add_with_" + action_name.rsplit(".", 1)[-1].replace("$", "")


def _width(t):
    """Bits of a bf-rt.json type ({"type": "bytes", "width": 32} or {"type": "uint32"})."""
    if "width" in t:
        return int(t["width"])
    return {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "bool": 1}.get(t.get("type"), 64)


def _data_field(d):
    s = d.get("singleton", d)
    return [s["name"], _width(s["type"]), bool(d.get("mandatory", False))]


def reduce(bfrt, program=None, defines=""):
    """The parts of a bf-rt.json dict that the control plane's calls depend on."""
    tables = {}
    for t in bfrt["tables"]:
        name = t["name"]
        if name.startswith("$") or "." not in name:
            continue   # fixed tables ($pre, $mirror, port...) come from the driver, not the program
        entry = {"type": t.get("table_type", ""), "size": int(t.get("size", 0)),
                 "keys": [[k["name"], k.get("match_type", "Exact"), _width(k["type"])]
                          for k in t.get("key", [])]}
        actions = {}
        for a in t.get("action_specs", []):
            if a.get("action_scope") == "DefaultOnly":
                continue
            actions[a["name"]] = [_data_field(d) for d in a.get("data", [])]
        if actions:
            entry["actions"] = actions
        data = [_data_field(d) for d in t.get("data", [])]
        if data:
            entry["data"] = data
        tables[name] = entry
    return {"program": program, "defines": defines, "tables": dict(sorted(tables.items()))}


def file_name(program, defines):
    """p4/control/bfrt/ file name of a build: program and -D flags, sorted."""
    flags = sorted(d.removeprefix("-D").removeprefix("DTA_").lower() for d in defines.split())
    return "__".join([program] + flags).replace("=", "-") + ".json"


def reduce_p4_out(p4_out, into):
    """Reduces every build of a `P4_OUT` directory of scripts/p4-check.sh (one
    `<program>-N/` with `defines` and `bf-rt.json` per build) into `into`; returns the files."""
    import os
    written = []
    for d in sorted(os.listdir(p4_out)):
        build = os.path.join(p4_out, d)
        schema = os.path.join(build, "bf-rt.json")
        if not os.path.isfile(schema):
            continue
        program = d.rsplit("-", 1)[0]
        with open(os.path.join(build, "defines")) as f:
            defines = " ".join(f.read().split())
        with open(schema) as f:
            out = reduce(json.load(f), program, defines)
        path = os.path.join(into, file_name(program, defines))
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        written.append(path)
    return written


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bfrt_json", nargs="?")
    ap.add_argument("--program")
    ap.add_argument("--defines", default="")
    ap.add_argument("--p4-out", help="reduce every build of this P4_OUT directory ...")
    ap.add_argument("--into", help="... into this directory (p4/control/bfrt)")
    a = ap.parse_args(argv)
    if a.p4_out:
        for path in reduce_p4_out(a.p4_out, a.into or "."):
            print(path)
        return 0
    if not a.bfrt_json or not a.program:
        ap.error("BFRT_JSON and --program, or --p4-out")
    with open(a.bfrt_json) as f:
        out = reduce(json.load(f), a.program, a.defines)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
