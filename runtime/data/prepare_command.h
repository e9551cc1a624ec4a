// `loom data prepare`: the command line over Prepare (prepare.h).
//
//   loom data prepare --input FILE... --out DIR
//       [--tokenizer bytes|sentencepiece|gpt2]
//       [--train-tokenizer bpe|unigram --vocab-size N [--train-sentences N]
//        | --model FILE.model | --vocab vocab.json --merges merges.txt
//        | --tokenizer-json tokenizer.json | --tokenizer-dir DIR]
//       [--documents file|blank-line|line=TEXT] [--val-fraction F] [--seed S]
//       [--shard-tokens N] [--dtype auto|u16|u32] [--format llmc|raw] [--threads N] [--progress]
//
// A progress bar goes to stderr on a terminal or with --progress; the
// summary (documents, tokens, shards, tokens/s) to stdout. Exit codes: 0
// done, 2 bad usage or bad input (the message names the flag or file), 1 a
// failure to write.
#pragma once

#include <string>
#include <vector>

namespace loom::runtime::data {

int RunDataCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::data
