// The tool's progress output (apps/holdfast/progress.hpp): into a file, one line per phase
// and no carriage returns; disabled, nothing.
#include "progress.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace holdfast::cli {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f))
    text += static_cast<char>(c);
  return text;
}

TEST(ProgressBar, IntoAFileItWritesOneLinePerPhase) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(ProgressBar::is_terminal(f));
  {
    ProgressBar bar(f, true, "s");
    bar.phase(0.0, 10.0, "warm-up");
    bar.phase(0.5, 10.0, "warm-up");
    bar.phase(1.0, 10.0, "warm-up");
    bar.phase(2.0, 10.0, "write storm, 2 s");
    bar.clear();
    bar.phase(2.1, 10.0, "write storm, 2 s");
    bar.finish();
  }
  EXPECT_EQ(contents(f), "  0.0/10 s  warm-up\n  2.0/10 s  write storm, 2 s\n");
  std::fclose(f);
}

TEST(ProgressBar, CountsHaveNoUnit) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(f, true);
    bar.phase(1, 5, "scenario spike");
  }
  EXPECT_EQ(contents(f), "1/5  scenario spike\n");
  std::fclose(f);
}

TEST(ProgressBar, DisabledItWritesNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(f, false, "s");
    bar.phase(1, 5, "warm-up");
    bar.finish();
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace holdfast::cli
