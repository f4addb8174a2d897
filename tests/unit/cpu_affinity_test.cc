#include "isolation/cpu_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <vector>

namespace corral::isolation {
namespace {

const std::vector<int> kFour = {0, 1, 2, 3};

TEST(CpuAffinityTest, CeilOfTheLimitFromASpreadStart) {
  EXPECT_EQ(ChooseCpus(1000, kFour, 0), (std::vector<int>{0}));
  EXPECT_EQ(ChooseCpus(1000, kFour, 1), (std::vector<int>{1}));
  EXPECT_EQ(ChooseCpus(1000, kFour, 5), (std::vector<int>{1}));
  EXPECT_EQ(ChooseCpus(250, kFour, 3), (std::vector<int>{3}));
  // 1.5 CPUs: two, the second pair for the second slot.
  EXPECT_EQ(ChooseCpus(1500, kFour, 1), (std::vector<int>{2, 3}));
  // Three from position 3: wraps round, and comes back sorted.
  EXPECT_EQ(ChooseCpus(2500, kFour, 1), (std::vector<int>{0, 1, 3}));
}

TEST(CpuAffinityTest, OnlyAllowedCpusAreChosen) {
  const std::vector<int> allowed = {2, 5, 7};
  EXPECT_EQ(ChooseCpus(500, allowed, 0), (std::vector<int>{2}));
  EXPECT_EQ(ChooseCpus(500, allowed, 2), (std::vector<int>{7}));
  EXPECT_EQ(ChooseCpus(2000, allowed, 1), (std::vector<int>{2, 7}));
}

TEST(CpuAffinityTest, NothingToPinWithoutALimitOrWithAllCpus) {
  EXPECT_TRUE(ChooseCpus(0, kFour, 0).empty());
  EXPECT_TRUE(ChooseCpus(4000, kFour, 0).empty());
  EXPECT_TRUE(ChooseCpus(3001, kFour, 0).empty());
  EXPECT_TRUE(ChooseCpus(1000, {}, 0).empty());
  // Control: just under all of them still pins.
  EXPECT_EQ(ChooseCpus(3000, kFour, 0).size(), 3u);
}

TEST(CpuAffinityTest, ListTextIsTheKernelsFormat) {
  EXPECT_EQ(CpuListText({0, 1, 2, 5}), "0-2,5\n");
  EXPECT_EQ(CpuListText({3}), "3\n");
  EXPECT_EQ(CpuListText({0, 2}), "0,2\n");
  EXPECT_EQ(CpuListText({1, 2, 3, 7, 8}), "1-3,7-8\n");
  EXPECT_EQ(CpuListText({}), "");
}

TEST(CpuAffinityTest, MaskHasOneBitPerCpu) {
  constexpr size_t kBits = sizeof(unsigned long) * 8;
  std::vector<unsigned long> mask = CpuMask({0, 3, static_cast<int>(kBits) + 1});
  ASSERT_EQ(mask.size(), 2u);
  EXPECT_EQ(mask[0], 0b1001ul);
  EXPECT_EQ(mask[1], 0b10ul);
  EXPECT_TRUE(CpuMask({}).empty());
}

TEST(CpuAffinityTest, AllowedCpusAreThisThreadsAffinity) {
  auto allowed = AllowedCpus();
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  ASSERT_FALSE(allowed->empty());
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(allowed->size(), static_cast<size_t>(CPU_COUNT(&set)));
  for (int cpu : *allowed) EXPECT_TRUE(CPU_ISSET(cpu, &set)) << cpu;
}

}  // namespace
}  // namespace corral::isolation
