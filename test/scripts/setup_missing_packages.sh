#!/usr/bin/env bash
# Set-up as a non-root user on a machine missing packages: prints the exact
# apt-get line, fails, and installs nothing.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
if ! ce_is_root; then
    echo "needs root to switch to an unprivileged user; skipped as not applicable"
    exit 0
fi
missing=counter-ext-no-such-package
# nobody may not be able to enter the checkout (a clone in root's home is
# 0700): it sources a copy of test/lib.sh from a directory of its own that it
# can read, and starts in /.
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/test" && cp "$CE_TOP/test/lib.sh" "$tmp/test/lib.sh" || exit 1
chmod 755 "$tmp" "$tmp/test" && chmod 644 "$tmp/test/lib.sh"
out=$(cd / && runuser -u nobody -- env CE_TOP="$tmp" bash -c "source '$tmp/test/lib.sh'; ce_require_packages make $missing" 2>&1)
st=$?
echo "$out"
[ $st -ne 0 ] || { echo "expected a non-zero exit"; exit 1; }
grep -qx "run as root:  apt-get update && apt-get install -y $missing" <<<"$out" ||
    { echo "the exact apt-get line is missing"; exit 1; }
dpkg-query -W "$missing" >/dev/null 2>&1 && { echo "something was installed"; exit 1; }
echo ok
