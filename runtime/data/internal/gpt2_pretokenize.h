// GPT-2's pre-tokenizer: the split of text into pieces that byte-level BPE
// then encodes one at a time. GPT-2 writes it as the regular expression
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// matched leftmost-first from the start of the text, again after each match.
// Gpt2PieceEnd matches it by hand (std::regex has no \p{L} or \p{N}):
//
//   - a contraction: an apostrophe (U+0027) and s, t, re, ve, m, ll or d,
//     lower case, as written;
//   - an optional single space (U+0020) before a run of letters, of numbers,
//     or of characters that are none of letter, number or white space;
//   - a run of white space, less its last character when a non-space
//     follows it (that space then starts the next piece), or a single white
//     space character when the run is one long and a non-space follows.
//
// Classes: letters and numbers are Unicode's general categories L* and N*,
// white space is the White_Space property (internal/unicode_classes.h). A
// byte that is not part of well-formed UTF-8 is a character of its own in
// the third class (neither letter, number nor space), as Python sees it after
// decode(errors="surrogateescape"); so every byte string splits, and the
// pieces always concatenate back to the text.
#pragma once

#include <cstddef>
#include <string_view>

namespace loom::runtime::data::internal {

// The end (exclusive byte offset) of the piece that starts at `pos`
// (pos < text.size()); always > pos.
size_t Gpt2PieceEnd(std::string_view text, size_t pos);

// Calls fn(piece) for each piece of `text`, in order.
template <typename Fn>
void Gpt2Pretokenize(std::string_view text, Fn&& fn) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2PieceEnd(text, pos);
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace loom::runtime::data::internal
