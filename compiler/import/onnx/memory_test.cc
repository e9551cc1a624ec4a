// Peak memory of an import: the bound is 2x the file's size plus
// 256 MiB. A model with a 64 MiB initializer is written to disk, then a child
// process (so the peak counts the import alone, from the child's resident size
// at fork) imports it and reports its peak resident size (ru_maxrss).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "compiler/import/onnx/importer.h"
#include "compiler/import/onnx/testing/onnx_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::import::onnx {
namespace {

int64_t MaxRssBytes() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

int64_t CurrentRssBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(OnnxImportMemory, PeakStaysWithinTwiceTheFilePlus256MiB) {
  const int64_t rows = 4096, cols = 4096;  // 64 MiB of f32
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/big.onnx";
  int64_t file_bytes = 0;
  {
    testing::ModelBuilder mb(17);
    mb.Input("x", DType::kF32, {2, rows});
    mb.Initializer("w", Tensor::Zeros({rows, cols}, DType::kF32));
    mb.Node("MatMul", {"x", "w"}, {"y"});
    mb.Output("y");
    std::string bytes = mb.Bytes();
    file_bytes = static_cast<int64_t>(bytes.size());
    std::ofstream(path, std::ios::binary) << bytes;
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    int64_t report[3] = {CurrentRssBytes(), 0, 0};
    auto m = ImportModel(path);
    report[1] = MaxRssBytes();
    report[2] = m.ok() ? m->NumParameters() : -1;
    (void)!write(fds[1], report, sizeof(report));
    _exit(0);
  }
  close(fds[1]);
  int64_t report[3] = {0, 0, 0};
  ASSERT_EQ(read(fds[0], report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(report[2], rows * cols) << "the import failed in the child";
  const int64_t used = report[1] - report[0], bound = 2 * file_bytes + (int64_t{256} << 20);
  std::printf("file %.1f MiB: import peak %.1f MiB above the start (bound %.1f MiB)\n", file_bytes / 1048576.0,
              used / 1048576.0, bound / 1048576.0);
  EXPECT_LE(used, bound);
}

}  // namespace
}  // namespace loom::compiler::import::onnx
