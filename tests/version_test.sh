#!/usr/bin/env bash
# version_test.sh: `cpulm --version` names the commit of the build, and cmake/version.cmake
# (run at build time) follows `git describe`, rewrites its header only when that changes,
# and falls back to the project version without git. Usage: version_test.sh CPULM SRC CMAKE
set -u
CPULM=$1 SRC=$2 CMAKE=$(command -v "$3")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1 ${3:-}"; fail=1; fi; }
gen() { "$CMAKE" -DSRC="$1" -DOUT="$TMP/h" -P "$SRC/cmake/version.cmake"; }
g() { git -C "$TMP/repo" -c user.name=t -c user.email=t@t "$@" >/dev/null 2>&1; }

# the built binary: "cpulm 0.1.0 (<git describe of the source>[-dirty]), kernels: ..."
v=$("$CPULM" --version)
if want=$(git -C "$SRC" describe --always 2>/dev/null); then
  case "$v" in "cpulm "*" ($want)"* | "cpulm "*" ($want-dirty)"*) r=0 ;; *) r=1 ;; esac
  check version_names_build_commit $r "('$v', source at $want: rebuilt since the last commit?)"
else
  case "$v" in "cpulm "*" ("*) r=1 ;; "cpulm "*) r=0 ;; *) r=1 ;; esac
  check version_without_git $r "('$v')"
fi

# the generator on a scratch repository: one commit, then an unchanged rerun, a new commit,
# uncommitted changes, and a directory outside any checkout
mkdir "$TMP/repo" && g init -q && echo a >"$TMP/repo/f" && g add f && g commit -qm a
a=$(git -C "$TMP/repo" describe --always)
gen "$TMP/repo" && grep -qx "#define CPULM_COMMIT_STR \"$a\"" "$TMP/h"
check header_names_commit $? "($(cat "$TMP/h"))"
t0=$(stat -c %y "$TMP/h")
sleep 0.02; gen "$TMP/repo"
[ "$(stat -c %y "$TMP/h")" = "$t0" ]; check unchanged_header_not_rewritten $?
echo b >"$TMP/repo/f" && g commit -qam b
b=$(git -C "$TMP/repo" describe --always)
gen "$TMP/repo" && [ "$a" != "$b" ] && grep -qx "#define CPULM_COMMIT_STR \"$b\"" "$TMP/h"
check header_follows_new_commit $? "($(cat "$TMP/h"))"
echo c >"$TMP/repo/f"
gen "$TMP/repo" && grep -qx "#define CPULM_COMMIT_STR \"$b-dirty\"" "$TMP/h"
check header_marks_dirty_tree $? "($(cat "$TMP/h"))"
mkdir "$TMP/plain"
GIT_CEILING_DIRECTORIES=$TMP gen "$TMP/plain" && ! grep -q CPULM_COMMIT_STR "$TMP/h"
check no_checkout_no_commit $? "($(cat "$TMP/h"))"
echo a >"$TMP/repo/f"
env PATH=/nonexistent "$CMAKE" -DSRC="$TMP/repo" -DOUT="$TMP/h" -P "$SRC/cmake/version.cmake" &&
  ! grep -q CPULM_COMMIT_STR "$TMP/h"
check no_git_no_commit $? "($(cat "$TMP/h"))"
exit $fail
