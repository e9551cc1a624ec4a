// Save / commit / retention / async save, and resharding reads.
#include "runtime/checkpoint/checkpoint.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/test_util.h"

namespace loom::runtime::checkpoint {
namespace {

using testing::BitwiseEqual;
using testing::FreshDir;
using testing::GridShards;
using testing::Pattern;
using testing::SampleRequest;
using testing::Slice;

TEST(Checkpoint, SaveCommitAndLoad) {
  std::string root = FreshDir("save");
  SaveRequest req = SampleRequest(10);
  ASSERT_TRUE(SaveCheckpoint(root, req).ok());
  EXPECT_EQ(*ReadLatestPointer(root), "step_000000000010");
  auto names = ListDir(root + "/step_000000000010");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 5u);  // manifest + 4 rank files

  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->skipped.empty());
  const Manifest& m = r->ckpt.manifest;
  EXPECT_EQ(m.step, 10);
  EXPECT_EQ(m.sampler, req.sampler);
  EXPECT_EQ(m.job_spec, req.job_spec);
  EXPECT_EQ(m.layout, req.layout);
  EXPECT_EQ(m.Find("w")->shards.size(), 4u);
  auto reader = CheckpointReader::Open(r->ckpt);
  ASSERT_TRUE(reader.ok());
  auto w = reader->ReadFull("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(BitwiseEqual(*w, Pattern({7, 10}, DType::kF32, 10)));
  EXPECT_TRUE(BitwiseEqual(*reader->ReadFull("b"), Pattern({5}, DType::kBF16, 1)));
  EXPECT_TRUE(BitwiseEqual(*reader->ReadFull("count"), Pattern({}, DType::kI64, 10)));
  EXPECT_FALSE(reader->ReadFull("nope").ok());
  EXPECT_FALSE(reader->ReadSlice("w", {5, 0}, {3, 10}).ok());  // past the end
  EXPECT_FALSE(reader->ReadSlice("w", {0}, {3}).ok());        // wrong rank
  // The same step cannot be committed twice.
  EXPECT_EQ(SaveCheckpoint(root, req).code(), absl::StatusCode::kAlreadyExists);
}

TEST(Checkpoint, RejectsBadRequests) {
  std::string root = FreshDir("badreq");
  SaveRequest req = SampleRequest(1);
  req.tensors[0].shards.pop_back();  // does not cover "w"
  auto s = SaveCheckpoint(root, req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cover")) << s;
  req = SampleRequest(1);
  req.tensors[0].shards[0].rank = 7;
  EXPECT_EQ(SaveCheckpoint(root, req).code(), absl::StatusCode::kInvalidArgument);
  req = SampleRequest(1);
  req.tensors[1].dtype = DType::kF32;
  EXPECT_EQ(SaveCheckpoint(root, req).code(), absl::StatusCode::kInvalidArgument);
  auto dirs = ListCheckpoints(root);
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
  auto names = ListDir(root);
  EXPECT_TRUE(names->empty()) << names->size();  // failed saves leave nothing behind
}

TEST(Checkpoint, RetentionAndStaleCleanup) {
  std::string root = FreshDir("retain");
  for (int step = 1; step <= 5; ++step) ASSERT_TRUE(SaveCheckpoint(root, SampleRequest(step), {2}).ok());
  auto dirs = ListCheckpoints(root);
  ASSERT_EQ(dirs->size(), 2u);
  EXPECT_EQ((*dirs)[0].first, 5);
  EXPECT_EQ((*dirs)[1].first, 4);
  EXPECT_EQ(*ReadLatestPointer(root), "step_000000000005");
  ASSERT_TRUE(MakeDir(root + "/.tmp.step_000000000006").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/.tmp.step_000000000006/rank00000.safetensors", "partial").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/latest.tmp.123", "x").ok());
  ASSERT_TRUE(CleanStale(root).ok());
  auto names = ListDir(root);
  EXPECT_EQ(names->size(), 3u);  // two step folders + latest
}

// After Close() no checkpoint becomes visible: a saver thread commits step
// after step while the gate is closed at a random moment; the newest folder on
// disk is the last step Close() reports, and later saves fail as Cancelled
// without leaving their temporary folder.
TEST(Checkpoint, ClosedCommitGateCommitsNothingMore) {
  std::mt19937 rng(7);
  for (int round = 0; round < 10; ++round) {
    std::string root = FreshDir("gate" + std::to_string(round));
    CommitGate gate;
    CheckpointOptions o;
    o.keep_last = 0;
    o.gate = &gate;
    std::atomic<int> cancelled{0};
    std::thread saver([&] {
      for (int step = 1; step <= 200 && cancelled == 0; ++step) {
        absl::Status s = SaveCheckpoint(root, SampleRequest(step), o);
        if (absl::IsCancelled(s)) ++cancelled;
        ASSERT_TRUE(s.ok() || absl::IsCancelled(s)) << s;
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(rng)));
    const int64_t last = gate.Close();
    saver.join();
    auto dirs = ListCheckpoints(root);
    ASSERT_TRUE(dirs.ok());
    EXPECT_EQ(dirs->empty() ? -1 : (*dirs)[0].first, last) << "round " << round;
    auto names = ListDir(root);
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) EXPECT_FALSE(absl::StartsWith(n, ".tmp.")) << n;
    EXPECT_TRUE(gate.closed());
    EXPECT_TRUE(absl::IsCancelled(SaveCheckpoint(root, SampleRequest(1000), o)));
  }
}

// Saved on a 2x2 grid; read back under other shardings, bitwise.
TEST(Checkpoint, ReshardOnLoad) {
  std::string root = FreshDir("reshard");
  Tensor w = Pattern({9, 13}, DType::kF32, 3);
  Tensor h = Pattern({6, 4, 5}, DType::kF16, 4);
  SaveRequest req;
  req.step = 1;
  req.world_size = 4;
  req.tensors.push_back(GridShards("w", w, {2, 2}));
  req.tensors.push_back(GridShards("h", h, {1, 2, 2}));
  ASSERT_TRUE(SaveCheckpoint(root, req).ok());
  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok());
  auto reader = CheckpointReader::Open(r->ckpt);
  // Full tensors (a single process).
  EXPECT_TRUE(BitwiseEqual(*reader->ReadFull("w"), w));
  EXPECT_TRUE(BitwiseEqual(*reader->ReadFull("h"), h));
  // Three uneven row slices (e.g. tp=3 over rows).
  int64_t rows[] = {0, 4, 6, 9};
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> off = {rows[i], 0}, len = {rows[i + 1] - rows[i], 13};
    auto s = reader->ReadSlice("w", off, len);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(BitwiseEqual(*s, Slice(w, off, len))) << i;
  }
  // Column slices and random rectangles.
  std::mt19937 rng(5);
  for (int it = 0; it < 200; ++it) {
    std::vector<int64_t> off(3), len(3);
    for (int d = 0; d < 3; ++d) {
      off[d] = rng() % (h.dim(d) + 1);
      len[d] = rng() % (h.dim(d) - off[d] + 1);
    }
    auto s = reader->ReadSlice("h", off, len);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(BitwiseEqual(*s, Slice(h, off, len))) << it;
  }
  // A slice inside one shard reads only what it needs (at most twice that, in one pread).
  auto fresh = CheckpointReader::Open(r->ckpt);
  ASSERT_TRUE(fresh->ReadSlice("w", {1, 1}, {2, 3}).ok());
  EXPECT_LE(fresh->bytes_read(), 2u * 2 * 3 * 4 + 6 * 4);
  EXPECT_GE(fresh->bytes_read(), 2u * 3 * 4);
}

TEST(Checkpoint, MultiRankProtocol) {
  // The per-rank API as separate processes would use it.
  std::string root = FreshDir("ranks");
  Tensor w = Pattern({4, 4}, DType::kF64, 0);
  auto tmp = BeginSave(root, 3);
  ASSERT_TRUE(tmp.ok());
  Manifest m;
  m.step = 3;
  m.world_size = 2;
  TensorRecord rec;
  rec.name = "w";
  rec.dtype = DType::kF64;
  rec.shape = {4, 4};
  for (int rank = 0; rank < 2; ++rank) {
    // Each rank holds two 1x4 rows... of its half, written as two shards in one file.
    std::vector<RankShard> mine;
    for (int k = 0; k < 2; ++k) {
      int64_t row = rank * 2 + k;
      mine.push_back({"w", {row, 0}, Slice(w, {row, 0}, {1, 4})});
    }
    auto written = WriteRankShards(*tmp, rank, mine);
    ASSERT_TRUE(written.ok()) << written.status();
    for (auto& ws : *written) rec.shards.push_back(ws.record);
  }
  m.tensors.push_back(rec);
  ASSERT_TRUE(CommitSave(root, *tmp, m, {}).ok());
  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(BitwiseEqual(*CheckpointReader::Open(r->ckpt)->ReadFull("w"), w));
}

// Shards given by `load` instead of data (a GPU's state, read back when its
// bytes are due): the same records and bytes as with the data in hand, each
// shard loaded once, in order, and released before the next is loaded.
TEST(Checkpoint, LoadedShardsAreWrittenOneAtATime) {
  const Tensor w = Pattern({4, 6}, DType::kF32, 1), b = Pattern({6}, DType::kF32, 2);
  std::string dir_a = FreshDir("loaded_a"), dir_b = FreshDir("loaded_b");
  auto plain = WriteRankShards(dir_a, 0, {{"w", {0, 0}, w}, {"b", {0}, b}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::vector<std::string> order;
  std::vector<std::weak_ptr<Storage>> earlier;
  bool overlapped = false;
  auto loader = [&](const std::string& name, const Tensor& t) {
    return [&, name, t]() -> absl::StatusOr<Tensor> {
      for (const auto& e : earlier) overlapped |= !e.expired();
      order.push_back(name);
      Tensor copy = t.Clone();
      earlier.push_back(copy.storage());
      return copy;
    };
  };
  std::vector<RankShard> shards(2);
  shards[0].tensor = "w", shards[0].offsets = {0, 0}, shards[0].shape = {4, 6}, shards[0].load = loader("w", w);
  shards[1].tensor = "b", shards[1].offsets = {0}, shards[1].shape = {6}, shards[1].load = loader("b", b);
  auto loaded = WriteRankShards(dir_b, 0, shards);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(order, (std::vector<std::string>{"w", "b"}));
  EXPECT_FALSE(overlapped) << "a loaded shard was still held when the next was loaded";
  ASSERT_EQ(loaded->size(), plain->size());
  for (size_t i = 0; i < plain->size(); ++i) {
    EXPECT_EQ((*loaded)[i].record.key, (*plain)[i].record.key);
    EXPECT_EQ((*loaded)[i].record.lengths, (*plain)[i].record.lengths);
    EXPECT_EQ((*loaded)[i].record.byte_begin, (*plain)[i].record.byte_begin);
    EXPECT_EQ((*loaded)[i].record.crc32c, (*plain)[i].record.crc32c);
  }
  // A load that gives another shape than declared fails the save, naming the tensor.
  shards[1].shape = {7};
  auto bad = WriteRankShards(FreshDir("loaded_c"), 0, shards);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("'b'"), std::string::npos) << bad.status();
}

TEST(Checkpoint, AsyncSaveUsesSnapshot) {
  std::string root = FreshDir("async");
  AsyncCheckpointer saver(root, {2});
  Tensor w = Pattern({64, 64}, DType::kF32, 1);
  Tensor expect = w.Clone();
  for (int step = 1; step <= 3; ++step) {
    SaveRequest req;
    req.step = step;
    req.tensors.push_back(GridShards("w", w, {1, 1}));
    req.tensors[0].shards[0].data = w;  // a view of the live tensor, not a copy
    if (step == 3) expect = w.Clone();
    ASSERT_TRUE(saver.SaveAsync(req).ok());
    w.Fill(-step);  // the "training step" mutates parameters while the save runs
  }
  ASSERT_TRUE(saver.Wait().ok());
  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ckpt.step, 3);
  EXPECT_TRUE(BitwiseEqual(*CheckpointReader::Open(r->ckpt)->ReadFull("w"), expect));
  EXPECT_EQ(ListCheckpoints(root)->size(), 2u);
}

}  // namespace
}  // namespace loom::runtime::checkpoint
