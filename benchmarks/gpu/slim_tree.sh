#!/usr/bin/env bash
# The device copies the working tree (tracked files included) and takes at most 64 MiB of it; the
# held-out recordings alone are ~75 MB. Before a device call, move the largest recording folders
# out of the tree; put them back right after the call (nothing is committed while they are out).
#   bash benchmarks/gpu/slim_tree.sh out [STASH]    (STASH: default ../stash-traces)
#   bash benchmarks/gpu/slim_tree.sh back [STASH]
set -eu
cd "$(dirname "$0")/../.."
STASH=${2:-../stash-traces}
DIRS="heldout2 heldout3 heldout4 heldout5 heldout6 heldout7 heldout8 heldout9 heldout10 heldout11 heldout12 heldout13 heldout14 heldout15 heldout16 heldout17 heldout18 heldout19 heldout20 heldout21 heldout22 heldout23 heldout24 heldout25 heldout26"
case "${1:-}" in
out)
    mkdir -p "$STASH"
    for d in $DIRS; do [ -d "sample_traces/$d" ] && mv "sample_traces/$d" "$STASH/$d"; done
    ;;
back)
    for d in $DIRS; do [ -d "$STASH/$d" ] && mv "$STASH/$d" "sample_traces/$d"; done
    ;;
*)
    echo "usage: $0 out|back [STASH]" >&2; exit 2
    ;;
esac
git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{printf "tracked files present: %.1f MiB\n", $1 / 1048576}'
