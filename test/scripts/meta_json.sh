#!/usr/bin/env bash
# META.json (PGXN Meta Spec 1.0.0) is valid, and agrees with the control
# file, debian/changelog, the supported majors and LICENSE. No PGXN validator
# is packaged in Debian, so the spec's rules are checked here with python3.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import json, re, sys

errors = []
def need(cond, what):
    if not cond:
        errors.append(what)

try:
    meta = json.load(open("META.json"))
except Exception as e:
    sys.exit(f"META.json does not parse: {e}")

semver = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+)?$")
# a version range: "1.2.0", ">= 1.2.0, < 2.0.0", "0" (any)
rng = re.compile(r"^\s*(0|(?:(?:==|!=|>=|<=|>|<)\s*)?\d+\.\d+\.\d+)(\s*,\s*(?:==|!=|>=|<=|>|<)\s*\d+\.\d+\.\d+)*\s*$")

for key in ("name", "abstract", "maintainer", "license", "meta-spec", "provides", "version"):
    need(key in meta, f"required key {key} is missing")
need(meta.get("name") == "counter_ext", "name is not counter_ext")
need(isinstance(meta.get("abstract"), str) and meta["abstract"], "abstract is not a string")
m = meta.get("maintainer")
need(isinstance(m, str) or (isinstance(m, list) and m and all(isinstance(x, str) for x in m)), "maintainer")
licenses = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd", "gfdl_1_2",
            "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1",
            "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source", "restricted",
            "unrestricted", "unknown"}
need(meta.get("license") == "postgresql", "license is not postgresql (LICENSE is the PostgreSQL License)")
need(meta.get("license") in licenses, "license is not a PGXN license string")
need(meta.get("meta-spec", {}).get("version") == "1.0.0", "meta-spec version is not 1.0.0")
v = meta.get("version", "")
need(bool(semver.match(v)), f"version {v!r} is not a semantic version")
for ext, p in meta.get("provides", {}).items():
    need(isinstance(p, dict) and "file" in p and "version" in p, f"provides.{ext} lacks file or version")
    need(bool(semver.match(p.get("version", ""))), f"provides.{ext}.version is not a semantic version")
    for f in ("file", "docfile"):
        if f in p:
            try:
                open(p[f]).close()
            except OSError:
                errors.append(f"provides.{ext}.{f} {p[f]} does not exist")
need("counter_ext" in meta.get("provides", {}), "provides lacks counter_ext")
for phase, rels in meta.get("prereqs", {}).items():
    need(phase in ("configure", "build", "test", "runtime", "develop"), f"prereqs phase {phase}")
    for rel, mods in rels.items():
        need(rel in ("requires", "recommends", "suggests", "conflicts"), f"prereqs.{phase}.{rel}")
        for mod, r in mods.items():
            need(isinstance(r, str) and bool(rng.match(r)), f"prereqs.{phase}.{rel}.{mod} {r!r} is not a version range")
need("PostgreSQL" in meta.get("prereqs", {}).get("runtime", {}).get("requires", {}), "no runtime PostgreSQL prereq")
for key in meta.get("resources", {}):
    need(key in ("homepage", "bugtracker", "repository") or key.startswith("x_"), f"resources.{key}")
need("resources" in meta, "resources is missing")
if "release_status" in meta:
    need(meta["release_status"] in ("stable", "testing", "unstable"), "release_status")
for t in meta.get("tags", []):
    need(isinstance(t, str) and 0 < len(t) < 256, f"tag {t!r}")

# Agreement with the rest of the tree.
control = open("counter_ext.control").read()
dv = re.search(r"^default_version\s*=\s*'([^']*)'", control, re.M).group(1)
need(v == dv or v.startswith(dv + "."), f"version {v} is not the control file's default_version {dv}")
need(meta["provides"]["counter_ext"]["version"] == v, "provides.counter_ext.version differs from version")
changelog = open("debian/changelog").readline()
dv_deb = re.match(r"^\S+ \(([^)]+)\)", changelog).group(1)
need(dv_deb.split("-")[0] == v, f"debian/changelog's version {dv_deb} is not {v}")
pg = meta["prereqs"]["runtime"]["requires"]["PostgreSQL"]
supported = re.search(r"^CE_SUPPORTED_MAJORS\s*=\s*(.*)$", open("Makefile").read(), re.M).group(1).split()
lo, hi = int(supported[0]), int(supported[-1]) + 1
need(pg.replace(" ", "") == f">={lo}.0.0,<{hi}.0.0", f"PostgreSQL prereq {pg!r} is not the Makefile's majors {supported}")
lic = open("LICENSE").read()
need(lic.startswith("PostgreSQL License"), "LICENSE is not the PostgreSQL License")
need("the counter_ext developers" in lic, "LICENSE's copyright holder is not the counter_ext developers")

if errors:
    print("META.json:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("ok")
PY
