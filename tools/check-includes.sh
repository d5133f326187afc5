#!/bin/sh
# Enforces the floors of the source tree (STYLE.md, "Allowed includes"; docs/internals.md):
#   cli/                      anything of the project
#   graph/                    codelets/sdp_tasks.h, runtime/{tensor,state}.h, models/, base/; no StarPU
#   policies/                 StarPU's scheduler API, runtime/{hint,trace}.h, models/, base/
#   codelets/*.c, *.h         codelets/, runtime/, models/, base/ and StarPU
#   runtime/                  runtime/, formats/, models/, base/ and StarPU
#   formats/, text/           their own folder, models/, base/; no StarPU
#   models/, codelets/cpu/,
#   codelets/cuda/            their own folder and base/ (models/ may not include base/ either)
#   base/                     base/ only
# Each rule is an allow-list of the project's folders: a quoted include outside it is an arrow
# against the floors.  System headers (<...>) are checked only for StarPU.
set -e
cd "$(dirname "$0")/.."
bad=0
# check FILES-PATTERN ALLOWED-QUOTED-REGEX STARPU(yes|no) WHY [EXCLUDE-REGEX]
check() {
    files=$(git ls-files "$1" | grep -E '\.(c|h|cu|cuh)$' | { if [ -n "$5" ]; then grep -vE "$5"; else cat; fi; })
    [ -n "$files" ] || return 0
    hits=$(echo "$files" | xargs grep -nE '^#include "' | grep -vE "#include \"(config\.h|$2)" || true)
    if [ "$3" = no ]; then
        hits="$hits$(echo "$files" | xargs grep -nE '^#include <starpu' || true)"
    fi
    if [ -n "$hits" ]; then
        echo "layering: $4:"
        echo "$hits"
        bad=1
    fi
}
check 'base/*' 'base/' no "base/ uses no other floor"
check 'models/*' 'models/' no "models/ is pure C"
check 'codelets/cpu/*' 'codelets/cpu/|base/' no "codelets/cpu/ kernels know no StarPU"
check 'codelets/cuda/*' 'codelets/cuda/|base/' no "codelets/cuda/ kernels know no StarPU"
check 'formats/*' 'formats/|models/|base/' no "formats/ is plain C over models/ and base/"
check 'text/*' 'text/|base/' no "text/ is plain C over base/"
check 'runtime/*' 'runtime/|formats/|models/|base/' yes \
    "the runtime core never includes graph/, codelets/, policies/, text/ or cli/"
check 'codelets/*' 'codelets/|runtime/|models/|base/' yes "codelets see no graph/, policies/ or cli/" \
    '^codelets/(cpu|cuda)/'
check 'policies/*' 'policies/|runtime/(hint|trace)\.h|models/|base/' yes \
    "policies never see graph or codelet structures"
check 'graph/*' 'graph/|codelets/sdp_tasks\.h|runtime/(tensor|state)\.h|models/|base/' no \
    "graph/ calls sdp_task_*() and sdp_rt_tensor_*() and never sees StarPU"
[ $bad -eq 0 ] && echo "check-includes: layering respected"
exit $bad
