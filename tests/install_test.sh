#!/usr/bin/env bash
# install_test.sh: `cmake --install` into a temporary prefix puts cpulm in bin/ and its price
# table in share/cpulm/, and the installed command finds the table on its own (outside the
# source tree). Usage: install_test.sh BUILD_DIR
set -u
BUILD=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1"; fail=1; fi; }
cmake --install "$BUILD" --prefix "$TMP/p" >"$TMP/log" 2>&1; check install_runs $?
[ -x "$TMP/p/bin/cpulm" ]; check installs_cpulm $?
[ -f "$TMP/p/share/cpulm/prices.tsv" ]; check installs_prices $?
[ -f "$TMP/p/share/doc/cpulm/README.md" ]; check installs_docs $?
inst=$(awk -F'\t' '!/^#/ && NF > 2 && $1 != "instance" {print $1; exit}' "$TMP/p/share/cpulm/prices.tsv")
(cd "$TMP" && env -u CPULM_PRICES "$TMP/p/bin/cpulm" plan --shape 1b --type q4_0 \
  --instance "$inst" --tps 10 >"$TMP/out" 2>"$TMP/err")
check installed_plan_finds_prices $?
grep -q "$inst" "$TMP/out"; check installed_plan_prices_instance $?
"$TMP/p/bin/cpulm" --version >/dev/null; check installed_version $?
exit $fail
