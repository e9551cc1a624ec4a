// Tokenizer throughput of `loom data prepare` on 1 and 2 threads.
//
//   bazel run -c opt //bench/data:tokenizer_bench -- [--mb 100] [--threads 1,2] [--dir /tmp/tokenizer_bench]
//
// Generates --mb MB of text: documents of Debian's fortunes corpus drawn with
// replacement by a seeded generator, written as one file with "%" lines
// between documents. Then, for two tokenizers, runs the whole of Prepare
// (prepare.h: reading, encoding, shard writing) once per thread count and
// reports tokens/s, MB/s and the speed-up over one thread:
//   sentencepiece  BPE, 8000 ids, trained on the first 4 MB (not timed);
//   gpt2           byte-level BPE with 2000 merges learned here from the first
//                  2 MB by a plain BPE trainer (not timed).
// The outputs of every thread count are compared byte for byte. The load
// average before each run is printed: the machine may be shared. No PyTorch
// counterpart: Debian packages no Python tokenizers library.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "runtime/data/gpt2_tokenizer.h"
#include "runtime/data/internal/gpt2_pretokenize.h"
#include "runtime/data/prepare.h"

namespace {

namespace fs = std::filesystem;
using loom::runtime::data::PrepareOptions;
using loom::runtime::data::PrepareSummary;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LoadAverage() {
  std::string s = Read("/proc/loadavg");
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
}

// The fortunes' documents (text between "%" lines), every file of the corpus.
std::vector<std::string> FortuneDocuments() {
  std::vector<std::string> docs;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    for (absl::string_view d : absl::StrSplit(Read(f.string()), "\n%\n"))
      if (!d.empty()) docs.push_back(absl::StrCat(d, "\n"));
  }
  return docs;
}

std::string GenerateCorpus(const std::string& path, int64_t bytes) {
  const std::vector<std::string> docs = FortuneDocuments();
  std::mt19937_64 rng(20241202);
  std::ofstream out(path, std::ios::binary);
  int64_t written = 0;
  while (written < bytes) {
    const std::string& d = docs[rng() % docs.size()];
    out << d << "%\n";
    written += d.size() + 2;
  }
  return path;
}

// A byte-level BPE learned from `text` the plain way (count every pair,
// merge the most frequent, repeat), written as vocab.json + merges.txt.
void TrainGpt2Files(const std::string& text, int merges, const std::string& dir) {
  const std::array<uint32_t, 256> alphabet = loom::runtime::data::Gpt2ByteAlphabet();
  std::vector<std::string> symbol(256);
  for (int b = 0; b < 256; ++b) {
    const uint32_t c = alphabet[b];
    symbol[b] = c < 0x80 ? std::string(1, static_cast<char>(c))
                         : std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  }
  absl::flat_hash_map<std::string, int64_t> pieces;
  loom::runtime::data::internal::Gpt2Pretokenize(text, [&](std::string_view p) { ++pieces[std::string(p)]; });
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [p, n] : pieces) {
    std::vector<int32_t> w;
    for (unsigned char c : p) w.push_back(c);
    words.emplace_back(std::move(w), n);
  }
  std::string merges_txt = "#version: 0.2\n";
  for (int m = 0; m < merges; ++m) {
    absl::flat_hash_map<uint64_t, int64_t> pairs;
    for (const auto& [w, n] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[static_cast<uint64_t>(w[i]) << 32 | w[i + 1]] += n;
    uint64_t best = 0;
    int64_t best_n = 0;
    for (const auto& [k, n] : pairs)
      if (n > best_n || (n == best_n && k < best)) best = k, best_n = n;
    if (best_n == 0) break;
    const int32_t l = static_cast<int32_t>(best >> 32), r = static_cast<int32_t>(best & 0xFFFFFFFF);
    const int32_t id = static_cast<int32_t>(symbol.size());
    symbol.push_back(symbol[l] + symbol[r]);
    merges_txt += symbol[l] + " " + symbol[r] + "\n";
    for (auto& [w, n] : words) {
      std::vector<int32_t> next;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == l && w[i + 1] == r) {
          next.push_back(id);
          ++i;
        } else {
          next.push_back(w[i]);
        }
      }
      w.swap(next);
    }
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < symbol.size(); ++i)
    if (!vocab.contains(symbol[i])) vocab[symbol[i]] = vocab.size();
  const size_t eot = vocab.size();
  vocab[loom::runtime::data::kEndOfText] = eot;
  std::ofstream(dir + "/vocab.json") << vocab.dump();
  std::ofstream(dir + "/merges.txt") << merges_txt;
}

std::map<std::string, std::string> FolderBytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = Read(e.path().string());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mb = 100;
  std::vector<int> threads = {1, 2};
  std::string dir = "/tmp/tokenizer_bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--mb" && absl::SimpleAtoi(v, &mb) && mb > 0) continue;
    if (f == "--dir") {
      dir = v;
      continue;
    }
    if (f == "--threads") {
      threads.clear();
      for (absl::string_view t : absl::StrSplit(v, ',')) threads.push_back(std::stoi(std::string(t)));
      continue;
    }
    std::fprintf(stderr, "usage: tokenizer_bench [--mb N] [--threads 1,2] [--dir D]\n");
    return 2;
  }
  fs::remove_all(dir);
  fs::create_directories(dir + "/gpt2");
  const std::string corpus = GenerateCorpus(dir + "/corpus.txt", mb << 20);
  const std::string text = Read(corpus);
  std::ofstream(dir + "/sample.txt") << text.substr(0, 4 << 20);
  std::printf("corpus: %s, %.1f MB of fortunes documents\n", corpus.c_str(), text.size() / 1e6);

  PrepareOptions train;
  train.inputs = {dir + "/sample.txt"};
  train.documents = "line=%";
  train.out_dir = dir + "/sp";
  train.train_type = "bpe";
  train.vocab_size = 8000;
  train.train_sentences = 300000;
  auto trained = loom::runtime::data::Prepare(train, nullptr);
  if (!trained.ok()) return std::fprintf(stderr, "training sentencepiece: %s\n", trained.status().ToString().c_str()), 1;
  TrainGpt2Files(text.substr(0, 2 << 20), 2000, dir + "/gpt2");

  std::vector<std::pair<std::string, PrepareOptions>> cases(2);
  cases[0].first = "sentencepiece";
  cases[0].second.tokenizer.set_dir(dir + "/sp");
  cases[1].first = "gpt2";
  cases[1].second.tokenizer.set_vocab(dir + "/gpt2/vocab.json");
  cases[1].second.tokenizer.set_merges(dir + "/gpt2/merges.txt");
  std::printf("%-14s %7s %10s %12s %8s %9s  %s\n", "tokenizer", "threads", "tokens", "tokens/s", "MB/s", "speed-up",
              "load average before");
  for (auto& [name, o] : cases) {
    o.inputs = {corpus};
    o.documents = "line=%";
    double base = 0;
    std::map<std::string, std::string> first;
    for (int t : threads) {
      o.threads = t;
      o.out_dir = absl::StrCat(dir, "/out_", name, "_", t);
      const std::string load = LoadAverage();
      auto s = loom::runtime::data::Prepare(o, nullptr);
      if (!s.ok()) return std::fprintf(stderr, "%s: %s\n", name.c_str(), s.status().ToString().c_str()), 1;
      const double tps = s->tokens[0] / s->encode_seconds;
      if (base == 0) base = tps;
      std::printf("%-14s %7d %10lld %12.0f %8.2f %8.2fx  %s\n", name.c_str(), t, static_cast<long long>(s->tokens[0]),
                  tps, s->text_bytes / 1e6 / s->encode_seconds, tps / base, load.c_str());
      std::fflush(stdout);
      std::map<std::string, std::string> bytes = FolderBytes(o.out_dir);
      if (first.empty()) {
        first = std::move(bytes);
      } else if (bytes != first) {
        std::printf("%s: the output of %d threads differs from %d thread(s)\n", name.c_str(), t, threads[0]);
        return 1;
      }
      fs::remove_all(o.out_dir);
    }
  }
  std::printf("outputs identical across thread counts\n");
  return 0;
}
