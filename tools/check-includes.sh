#!/bin/sh
# Enforces the layering of the source tree (STYLE.md, "Allowed includes"):
#   models/, codelets/cpu/, codelets/cuda/  no StarPU, no runtime/graph/policies headers (sdp_log.h allowed)
#   graph/                                  no StarPU and no StarPU-facing project headers
#   runtime/ (but cli/)                     no graph/, codelets/, policies/, runtime/cli/
#   policies/                               no graph/ or codelets/
set -e
cd "$(dirname "$0")/.."
bad=0
check() { # folder-pattern, forbidden-include-regex, why
    hits=$(git ls-files "$1" | grep -E '\.(c|h|cu)$' | xargs -r grep -nE "^#include [<\"]($2)" || true)
    if [ -n "$hits" ]; then
        echo "layering: $3:"
        echo "$hits"
        bad=1
    fi
}
check 'models/*' 'starpu|runtime/(tensor|init|state)|graph/|codelets/|policies/' "models/ is pure C"
check 'codelets/cpu/*' 'starpu|runtime/(tensor|init|state)|graph/|policies/|codelets/(cl_|sdp_tasks)' \
    "codelets/cpu/ kernels know no StarPU"
check 'codelets/cuda/*' 'starpu|runtime/(tensor|init|state)|graph/|policies/|codelets/(cl_|sdp_tasks)' \
    "codelets/cuda/ kernels know no StarPU"
check 'graph/*' 'starpu|runtime/tensor_starpu|codelets/(cl_common|codelets_internal)|codelets/cpu|policies/' \
    "graph/ calls sdp_task_*() and never sees StarPU"
for f in $(git ls-files 'runtime/*' | grep -v '^runtime/cli/' | grep -E '\.(c|h)$'); do
    if grep -nE '^#include "(graph|codelets|policies|runtime/cli)/' "$f"; then
        echo "layering: $f: the runtime core must not include graph/, codelets/, policies/ or cli/"
        bad=1
    fi
done
check 'policies/*' 'graph/|codelets/' "policies never see graph or codelet structures"
[ $bad -eq 0 ] && echo "check-includes: layering respected"
exit $bad
