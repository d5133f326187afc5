#!/bin/sh
# The options registry (cli/options.c), the --help of train and bench, docs/options.md and the
# recipe parser agree:
#   1. docs/options.md is what `slidedp options --markdown` prints now (regenerate it if not);
#   2. the flags of `slidedp train --help` and `slidedp bench --help` are the registry's flags of
#      that subcommand, no more and no fewer, and each names its recipe key;
#   3. the recipe parser knows every key of the registry and no other: for each section, its
#      list of known keys is the registry's, and each key is taken (a wrong value is refused as a
#      value, not as an unknown key).
set -u
top=${top_srcdir:-.}
bin=${top_builddir:-.}/slidedp
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# 1. the generated documentation
"$bin" options --markdown > "$tmp/options.md" || { echo "slidedp options --markdown failed"; exit 1; }
if ! diff -u "$top/docs/options.md" "$tmp/options.md" > "$tmp/diff"; then
    echo "docs/options.md differs from the registry (regenerate: slidedp options --markdown > docs/options.md):"
    head -n 40 "$tmp/diff"
    fail=1
fi

# 2. the help texts
"$bin" options --list > "$tmp/list" || { echo "slidedp options --list failed"; exit 1; }
for cmd in train bench; do
    awk -F '\t' -v c="$cmd" '$2 != "-" && index($3, c) { print $2 }' "$tmp/list" | sort > "$tmp/want"
    echo help >> "$tmp/want"
    sort -o "$tmp/want" "$tmp/want"
    "$bin" "$cmd" --help > "$tmp/help" || { echo "slidedp $cmd --help failed"; fail=1; }
    sed -n 's/^  \(-[a-z], \)\{0,1\}--\([a-z0-9-]*\).*/\2/p' "$tmp/help" | sort > "$tmp/got"
    if ! diff -u "$tmp/want" "$tmp/got" > "$tmp/diff"; then
        echo "slidedp $cmd --help lists other flags than the registry (- registry, + help):"
        cat "$tmp/diff"
        fail=1
    fi
    # each flag's entry names its recipe key (the help text may wrap: join it first)
    tr '\n' ' ' < "$tmp/help" | tr -s ' ' > "$tmp/help1"
    awk -F '\t' -v c="$cmd" '$1 != "-" && $2 != "-" && index($3, c) { print $1 " " $2 }' "$tmp/list" |
        while read -r key flag; do
            if ! grep -qF "($key;" "$tmp/help1"; then
                echo "slidedp $cmd --help: --$flag does not name $key"
                echo x >> "$tmp/bad"
            fi
        done
done
[ -e "$tmp/bad" ] && fail=1

# 3. the recipe parser's keys
for sec in model data batch optimizer schedule train output; do
    printf '%s:\n  no_such_key: 1\n' "$sec" > "$tmp/r.yaml"
    "$bin" train "$tmp/r.yaml" > /dev/null 2> "$tmp/err"
    got=$(sed -n "s/.*unknown key '$sec.no_such_key' (known: \(.*\)).*/\1/p" "$tmp/err" | tr -d ' ' | tr ',' '\n')
    want=$(awk -F '\t' -v s="$sec." 'index($1, s) == 1 { print substr($1, length(s) + 1) }' "$tmp/list")
    if [ "$got" != "$want" ]; then
        echo "recipe section $sec: the parser knows"; echo "$got"; echo "the registry has"; echo "$want"
        fail=1
    fi
done
awk -F '\t' '$1 != "-" { print $1 }' "$tmp/list" > "$tmp/keys"
n=0
while read -r key; do
    n=$((n + 1))
    printf '%s:\n  %s: [1, 2]\n' "${key%%.*}" "${key#*.}" > "$tmp/r.yaml"
    "$bin" train "$tmp/r.yaml" > /dev/null 2> "$tmp/err"
    if grep -q "unknown key" "$tmp/err" || ! grep -qF "$key" "$tmp/err"; then
        echo "recipe key $key is not taken by the parser:"; cat "$tmp/err"
        fail=1
    fi
done < "$tmp/keys"
echo "$n recipe keys, $(wc -l < "$tmp/list") options"
[ $fail -eq 0 ] && echo PASS || echo FAIL
exit $fail
