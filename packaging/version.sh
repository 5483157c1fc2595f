#!/usr/bin/env bash
# Prints the package version (Debian's rules: digits first, only [A-Za-z0-9.+~]) from git:
#   tag v1.2.3 on HEAD          -> 1.2.3
#   5 commits after v1.2.3      -> 1.2.3+git20261122.5.abc1234
#   no tag                      -> 0.0.0~git20261122.abc1234
# plus "+dirty" for uncommitted changes. The date is the commit's, so a rebuild gives the same.
set -euo pipefail
cd "$(dirname "$0")/.."

hash=$(git rev-parse --short=7 HEAD)
date=$(git log -1 --format=%cd --date=format:%Y%m%d)
dirty=""
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty="+dirty"
fi
if desc=$(git describe --tags --match 'v[0-9]*' --long 2>/dev/null); then
	# v1.2.3-5-gabc1234
	tag=${desc%-*-g*}
	ahead=${desc%-g*}
	ahead=${ahead##*-}
	base=${tag#v}
	base=${base//-/\~} # v1.2.3-rc1 -> 1.2.3~rc1 (sorts before 1.2.3)
	if [ "$ahead" = 0 ]; then
		echo "$base$dirty"
	else
		echo "$base+git$date.$ahead.$hash$dirty"
	fi
else
	echo "0.0.0~git$date.$hash$dirty"
fi
