// Prints the fault tables of classify.cpp as Markdown, for docs/faults.md.
// `fault_table` prints them; `fault_table --check docs/faults.md` fails when the document's
// generated section differs (a ctest runs it, so the document never drifts from the code).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "holdfast/core/classify.hpp"

namespace {

std::string fault_cells(const holdfast::Fault& f) {
  std::string s;
  s += std::string(holdfast::to_string(f.scope)) + " | ";
  s += std::string(f.transient() ? holdfast::to_string(f.outcome) : "") + " | ";
  s += std::string(f.transient() ? holdfast::to_string(f.pace) : "") + " | ";
  s += f.overload ? "yes" : "";
  return s;
}

// Appends instead of `"`" + std::string(...) + "`"`: GCC 12 at -O2/-O3 warns falsely
// (-Wrestrict) about the memcpy inside operator+(const char*, std::string&&).
std::string sqlstate_cell(std::string_view sqlstate) {
  if (sqlstate.empty()) return "(none)";
  std::string cell = "`";
  cell.append(sqlstate);
  cell += '`';
  return cell;
}

std::string tables() {
  std::ostringstream out;
  out << "### SQLite (extended result codes)\n\n"
      << "| code | name | canonical | retry scope | outcome | pace | overload |\n"
      << "|---:|---|---|---|---|---|---|\n";
  for (const auto& r : holdfast::sqlite_fault_table()) {
    out << "| " << r.code << " | `" << r.name << "` | " << holdfast::to_string(r.canonical) << " | "
        << fault_cells(r.fault) << " |\n";
  }
  out << "\n### PostgreSQL (SQLSTATE; two characters = the whole class)\n\n"
      << "| SQLSTATE | name | canonical | retry scope | outcome | pace | overload |\n"
      << "|---|---|---|---|---|---|---|\n";
  for (const auto& r : holdfast::sqlstate_fault_table()) {
    out << "| " << sqlstate_cell(r.sqlstate) << " | " << r.name << " | "
        << holdfast::to_string(r.canonical) << " | " << fault_cells(r.fault) << " |\n";
  }
  out << "\n### Cloudflare D1 (message contains, first match wins)\n\n"
      << "| message contains | canonical | retry scope | outcome | pace | overload |\n"
      << "|---|---|---|---|---|---|\n";
  for (const auto& r : holdfast::d1_fault_table()) {
    out << "| `" << r.needle << "` | " << holdfast::to_string(r.canonical) << " | "
        << fault_cells(r.fault) << " |\n";
  }
  return out.str();
}

constexpr const char* kBegin = "<!-- generated:fault-tables:begin -->\n";
constexpr const char* kEnd = "<!-- generated:fault-tables:end -->";

}  // namespace

int main(int argc, char** argv) {
  const std::string generated = tables();
  if (argc == 3 && std::string(argv[1]) == "--check") {
    std::ifstream in(argv[2]);
    std::stringstream doc;
    doc << in.rdbuf();
    const std::string text = doc.str();
    const auto b = text.find(kBegin);
    const auto e = text.find(kEnd);
    if (b == std::string::npos || e == std::string::npos) {
      std::cerr << argv[2] << ": generated section markers not found\n";
      return 1;
    }
    const std::string section =
        text.substr(b + std::string(kBegin).size(), e - b - std::string(kBegin).size());
    if (section != generated) {
      std::cerr << argv[2] << " is out of date: regenerate with "
                << "`build/debug/tests/docs/fault_table` and paste between the markers\n";
      return 1;
    }
    return 0;
  }
  std::cout << generated;
  return 0;
}
