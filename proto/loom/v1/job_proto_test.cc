#include "proto/loom/v1/job.pb.h"

#include "gtest/gtest.h"

namespace {

TEST(JobProto, SerializesAndParsesBack) {
  loom::v1::JobSpec spec;
  spec.set_name("gpt-small");
  spec.mutable_model()->set_family("gpt");
  spec.mutable_model()->set_n_head(3);
  spec.mutable_parallel()->set_backend("cpu:gloo,cuda:nccl");
  std::string wire = spec.SerializeAsString();
  loom::v1::JobSpec back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.model().n_head(), 3);
  EXPECT_EQ(back.parallel().backend(), "cpu:gloo,cuda:nccl");
  EXPECT_FALSE(back.ParseFromString(std::string("\xff\xff\xff", 3)));
}

}  // namespace
