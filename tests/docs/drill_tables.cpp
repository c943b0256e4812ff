// `drill_tables --check REPORT.json PAGE.md...`: fails when a page's generated drill blocks
// are not what `holdfast report` renders from REPORT.json (the run they came from, kept in
// docs/data/), so nobody edits a number by hand. A ctest runs it.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "drill_markdown.hpp"

namespace {

std::string read_whole(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::string_view(argv[1]) != "--check") {
    std::cerr << "usage: drill_tables --check REPORT.json PAGE.md...\n";
    return 2;
  }
  const nlohmann::json report = nlohmann::json::parse(read_whole(argv[2]), nullptr, false);
  if (!report.is_object() || !report.contains("storms")) {
    std::cerr << argv[2] << ": not a drill report\n";
    return 1;
  }
  int failed = 0;
  for (int i = 3; i < argc; ++i) {
    const std::string page = read_whole(argv[i]);
    int blocks = 0;
    if (holdfast::cli::replace_generated_blocks(page, report, &blocks) != page || blocks == 0) {
      std::cerr << argv[i] << ": " << (blocks == 0 ? "no generated drill block" : "differs from")
                << " " << argv[2] << "; run: holdfast report --into " << argv[i] << " " << argv[2]
                << "\n";
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
