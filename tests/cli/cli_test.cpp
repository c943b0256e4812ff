// The holdfast tool run as a process: every numeric flag is range-checked (one line on
// stderr, exit status 2), and nothing aborts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"

namespace {

using namespace cli_test;  // NOLINT(google-build-using-namespace): the tests' helpers

TEST(Cli, APortOutside0To65535IsRefusedNotBoundElsewhere) {
  expect_refused("panel --db /nonexistent/x.db --port 70000", "--port");
  expect_refused("panel --db /nonexistent/x.db --port -1", "--port");
}

TEST(Cli, ThePanelsLogPauseMustBeAFiniteNumberOfSecondsUpToAnHour) {
  expect_refused("panel --db /nonexistent/x.db --log-pause 0", "--log-pause");
  expect_refused("panel --db /nonexistent/x.db --log-pause nan", "--log-pause");
  expect_refused("panel --db /nonexistent/x.db --log-pause 1e9", "--log-pause");
}

TEST(Cli, AnEmptyDatabasePathIsAClearErrorNotAnAbort) {
  expect_refused("panel --db ''", "--db must not be empty");
  expect_refused("panel --pg ''", "--pg must not be empty");
}

TEST(Cli, DrillStormLengthsWarmupGapsAndLogPauseMustBeFiniteAndPositive) {
  for (const char* bad : {"-1", "0", "nan", "inf", "1e9", "abc"}) {
    expect_refused(std::string("drill --no-progress --storms ") + bad, "--storms");
  }
  expect_refused("drill --no-progress --storms 2,-1", "--storms");
  expect_refused("drill --no-progress --warmup 1e9", "--warmup");
  expect_refused("drill --no-progress --gap 0", "--gap");
  expect_refused("drill --no-progress --log-pause -1", "--log-pause");
  expect_refused("drill --no-progress --log-pause nan", "--log-pause");
}

TEST(Cli, DrillPayEveryAndWorkersAreAtLeastOne) {
  expect_refused("drill --no-progress --pay-every 0", "--pay-every");
  expect_refused("drill --no-progress --workers 0", "--workers");
  // The PostgreSQL drill's panels take at most 64: a usage error before anything starts.
  expect_refused("drill --no-progress --engine postgres --workers 65", "--workers 65");
  expect_refused("drill --no-progress --think-ms -5", "--think-ms");
}

TEST(Cli, LogsLimitAndBatchSizeAreRangeChecked) {
  expect_refused("logs --db x.db --limit 0", "--limit");
  expect_refused("logs prune --db x.db --older-than 90d --batch-size 0", "--batch-size");
}

TEST(Cli, ThePanelsDbMustBeARegularFileOrNotExistYet) {
  expect_refused("panel --port 0 --db /dev/null", "--db '/dev/null' is a character device");
  const fs::path dir = fresh_dir("db-kind");
  expect_refused("panel --port 0 --db " + dir.string(), "'" + dir.string() + "' is a directory");
  const fs::path fifo = dir / "club.db";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused("panel --port 0 --db " + fifo.string(), "'" + fifo.string() + "' is a FIFO");
  for (const char* disk : {"/dev/loop0", "/dev/sda", "/dev/vda"}) {
    struct stat st {};
    if (::stat(disk, &st) == 0 && S_ISBLK(st.st_mode)) {
      expect_refused(std::string("panel --port 0 --db ") + disk, "is a block device");
      break;
    }
  }
  fs::remove_all(dir);
}

TEST(Cli, AnUnknownFlagIsExitStatus2) {
  expect_refused("panel --no-such-flag", "no-such-flag");
}

// A SQLite file whose index pages are overwritten: quick_check reports it.
TEST(Cli, ReportRewritesOnlyAPagesGeneratedBlocksAndRefusesWhatIsNotADrillReport) {
  const fs::path dir =
      fs::temp_directory_path() / ("holdfast-cli-report-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path report = dir / "drill-report.json";
  std::ofstream(report) << R"({"engine": "sqlite", "payments_sent": 3, "payments_applied_twice": 0,
    "storms": [{"kind": "write", "seconds": 2, "start_s": 1, "end_s": 3,
                "strategies": [{"name": "none", "error_pages": 1, "p99_ms": 2100}]}]})";
  const fs::path page = dir / "page.md";
  std::ofstream(page) << "# Page\n<!-- begin drill summary (sqlite): test -->\nold\n"
                         "<!-- end drill summary (sqlite) -->\n";
  const fs::path plain = dir / "plain.md";
  std::ofstream(plain) << "# No generated block here\n";
  const fs::path not_report = dir / "other.json";
  std::ofstream(not_report) << R"({"scenario": "spike"})";

  CommandRun r = holdfast("report --into " + page.string() + " " + report.string());
  EXPECT_EQ(r.exit_status, 0) << r.err;
  std::stringstream text;
  text << std::ifstream(page).rdbuf();
  EXPECT_NE(text.str().find("| none | 1 / 2.1 s |"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("old"), std::string::npos) << text.str();

  r = holdfast("report --into " + plain.string() + " " + report.string());
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_NE(r.err.find("no generated drill block"), std::string::npos) << r.err;
  r = holdfast("report " + not_report.string());
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_NE(r.err.find("not a drill report"), std::string::npos) << r.err;
  r = holdfast("report " + (dir / "missing.json").string());
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
  expect_refused("report --svg " + (dir / "x.svg").string() + " --storm 2 " + report.string(),
                 "--storm");
  fs::remove_all(dir);
}

TEST(Cli, PanelCheckRefusesToStartOnACorruptFile) {
  const fs::path dir = fresh_dir("check");
  const std::string path = (dir / "club.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "PRAGMA page_size = 4096; CREATE TABLE t(x TEXT); CREATE INDEX tx ON t(x);"
                         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                         "WHERE i < 5000) INSERT INTO t SELECT printf('%08d-row', i) FROM n;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    // Scribble over the middle of the file (pages of the table and its index), not the header.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
    const std::string junk(8192, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const CommandRun r = holdfast("panel --check --port 0 --db " + path);
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("quick_check"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not starting"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Cli, APanelThatCannotListenExitsAtOnceNamingTheAddressAndTheReason) {
  const fs::path dir = fresh_dir("listen");
  const std::string db = (dir / "club.db").string();
  // A port another socket listens on.
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // A panel that hangs instead is killed after 10 s (137), which fails the test.
  const CommandRun in_use = holdfast("panel --db " + db + " --port " + port, "10");
  EXPECT_EQ(in_use.exit_status, 1) << in_use.err;
  EXPECT_NE(in_use.err.find("127.0.0.1:" + port), std::string::npos) << in_use.err;
  EXPECT_NE(in_use.err.find(std::strerror(EADDRINUSE)), std::string::npos) << in_use.err;
  ::close(taken);
  const CommandRun bad_host = holdfast("panel --db " + db + " --port 0 --host 999.1.1.1", "10");
  EXPECT_EQ(bad_host.exit_status, 1) << bad_host.err;
  EXPECT_NE(bad_host.err.find("999.1.1.1:0"), std::string::npos) << bad_host.err;
  EXPECT_NE(bad_host.err.find("not an address"), std::string::npos) << bad_host.err;
  fs::remove_all(dir);
}

// The private folders (holdfast-panel-<pid>-...) in `tmp`.
std::vector<std::string> private_folders(const fs::path& tmp) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(tmp))
    if (e.path().filename().string().rfind("holdfast-panel-", 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

TEST(Cli, APanelStopsCleanlyOnSighupSigintAndSigtermAndLeavesNothingInTheTempFolder) {
  const fs::path dir =
      fs::temp_directory_path() / ("holdfast-cli-signals-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "tmp");
  const std::string db = (dir / "club.db").string();
  const std::string tmpdir = (dir / "tmp").string();
  for (const int sig : {SIGHUP, SIGINT, SIGTERM}) {
    SCOPED_TRACE(::strsignal(sig));
    const PanelChild panel = start_panel(db, /*with_stderr=*/false, tmpdir);
    ASSERT_GE(panel.pid, 0);
    const pid_t pid = panel.pid;
    // It has started once it printed its sign-in link.
    const std::string printed = read_until(panel.out, [](const std::string& text) {
      return text.find("or open") != std::string::npos;
    });
    EXPECT_NE(printed.find("or open"), std::string::npos) << printed;
    // One server, nothing behind it: no private socket folder (the front's, before
    // ADR 0026).
    EXPECT_EQ(private_folders(dir / "tmp").size(), 0u);
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::close(panel.out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    EXPECT_EQ(private_folders(dir / "tmp").size(), 0u);
  }
  fs::remove_all(dir);
}

// ---- output nobody can receive: a closed pipe, a full device -----------------------------

// The exit status of `holdfast <args>` with stdout discarded and stderr on /dev/full, where
// every write fails with ENOSPC.
int exit_status_with_stderr_full(const std::string& args) {
  const std::string cmd =
      "timeout -s KILL 60 " + std::string(HOLDFAST_BIN) + " " + args + " >/dev/null 2>/dev/full";
  const int raw = std::system(cmd.c_str());
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
}

TEST(Cli, AnErrorExitKeepsItsStatusWhenStderrCannotBeWrittenInsteadOfAborting) {
  EXPECT_EQ(exit_status_with_stderr_full("report /nonexistent/drill-report.json"), 1);
  EXPECT_EQ(exit_status_with_stderr_full("logs --db /nonexistent/club.db"), 1);
  EXPECT_EQ(exit_status_with_stderr_full("panel --db /nonexistent/x.db --port 70000"), 2);
  EXPECT_EQ(exit_status_with_stderr_full("panel --no-such-flag"), 2);
}

TEST(Cli, ACommandWhoseOutputCannotBeWrittenExits1SayingSo) {
  const fs::path dir = fresh_dir("stdout-full");
  const fs::path report = dir / "drill-report.json";
  std::ofstream(report) << R"({"engine": "sqlite", "storms": []})";
  const fs::path err = dir / "err.txt";
  // A few hundred bytes: still in stdout's buffer when the command is done.
  const int raw = std::system(("timeout -s KILL 60 " + std::string(HOLDFAST_BIN) + " report " +
                               report.string() + " >/dev/full 2>" + err.string())
                                  .c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1) << "status " << raw;
  std::stringstream said;
  said << std::ifstream(err).rdbuf();
  EXPECT_NE(said.str().find("cannot write the output"), std::string::npos) << said.str();
  fs::remove_all(dir);
}

// The status line of the answer to `request` at 127.0.0.1:`port`, or "" when none came.
std::string status_line(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  // A panel that hangs fails the test instead of holding it.
  timeval limit{};
  limit.tv_sec = 30;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char chunk[512];
    while (answer.find("\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      answer.append(chunk, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return answer.substr(0, answer.find("\r\n"));
}

TEST(Cli, APanelWhoseOutputPipeWasClosedKeepsServingAndStopsNormally) {
  // `holdfast panel --db x.db 2>&1 | head -2`: after its two lines the reader is gone, and
  // every later log line meets a closed pipe.
  const fs::path dir = fresh_dir("closed-pipe");
  const std::string db = (dir / "club.db").string();
  const PanelChild panel = start_panel(db, /*with_stderr=*/true);
  ASSERT_GE(panel.pid, 0);
  const pid_t pid = panel.pid;
  const std::string printed = read_until(panel.out, [](const std::string& text) {
    return std::count(text.begin(), text.end(), '\n') >= 2;
  });
  ::close(panel.out);  // head exits
  // "panel (holdfast) on http://127.0.0.1:PORT/login ..."
  const std::string at = "http://127.0.0.1:";
  const std::size_t from = printed.find(at);
  ASSERT_NE(from, std::string::npos) << printed;
  const int port = std::atoi(printed.c_str() + from + at.size());
  ASSERT_GT(port, 0) << printed;

  const std::string healthz =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(status_line(port, healthz).rfind("HTTP/1.1 200", 0), 0u);
  // A write that logs a WARN line on the console (stderr: the closed pipe) and stores a row.
  const std::string body = "path=%2Fdashboard&digest=abc&note=closed%20pipe";
  const std::string report =
      "POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Type: application/x-www-form-urlencoded\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(status_line(port, report).rfind("HTTP/1.1 202", 0), 0u);
  EXPECT_EQ(status_line(port, healthz).rfind("HTTP/1.1 200", 0), 0u)
      << "the panel stopped answering after writing to the closed pipe";

  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_FALSE(WIFSIGNALED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  fs::remove_all(dir);
}

TEST(Cli, ReportRefusesAFifoOrADeviceAtOnceInsteadOfWaitingOnIt) {
  const fs::path dir = fresh_dir("report-kind");
  // A FIFO nobody writes to: reading it would wait forever (killed after 20 s: 137).
  const fs::path fifo = dir / "drill-report.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CommandRun r = holdfast("report " + fifo.string(), "20");
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find(fifo.string() + " is a FIFO, not a regular file"), std::string::npos)
      << r.err;
  r = holdfast("report /dev/null", "20");
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("/dev/null is a character device, not a regular file"), std::string::npos)
      << r.err;

  // A page to rewrite that is a FIFO, beside a good report.
  const fs::path good = dir / "good.json";
  std::ofstream(good) << R"({"engine": "sqlite", "storms": []})";
  const fs::path page = dir / "page.md";
  ASSERT_EQ(::mkfifo(page.c_str(), 0600), 0);
  r = holdfast("report --into " + page.string() + " " + good.string(), "20");
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find(page.string() + " is a FIFO"), std::string::npos) << r.err;

  // 300 MiB (sparse: no disk used) is refused by its size, before a byte is read.
  const fs::path big = dir / "big.json";
  std::ofstream(big).close();
  fs::resize_file(big, std::uintmax_t{300} << 20);
  r = holdfast("report " + big.string(), "20");
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("is 300 MiB, more than the 256 MiB"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// ---- two processes at once -----------------------------------------------------------------

bool answers_healthz(int port) {
  return shell_output("timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) +
                      " && printf \"GET /healthz HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n\" >&3 "
                      "&& head -c 12 <&3' "
                      "2>/dev/null") == "HTTP/1.1 200";
}

TEST(CliPg, TwoPanelsStartingAtTheSameInstantOnOneDatabaseBothServe) {
  const char* server = std::getenv("HOLDFAST_TEST_PG_URL");
  if (server == nullptr || *server == '\0') GTEST_SKIP() << "SKIPPED: no PostgreSQL test server";
  const std::string url(server);
  const std::string schema = "hf_cli_start_" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("psql -q '" + url + "' -c 'CREATE SCHEMA " + schema + "'").c_str()), 0);
  // Every table of both panels goes to the test's own schema.
  const std::string panel_url =
      url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema;
  const int base = 20000 + static_cast<int>(::getpid() % 20000);
  std::vector<int> pids;
  for (int i = 0; i < 2; ++i) {
    const std::string cmd = std::string(HOLDFAST_BIN) + " panel --pg '" + panel_url + "' --port " +
                            std::to_string(base + i) + " >/dev/null 2>&1 & echo $!";
    pids.push_back(std::stoi(shell_output(cmd)));
  }
  bool both = false;
  for (int tries = 0; tries < 200 && !both; ++tries) {
    both = answers_healthz(base) && answers_healthz(base + 1);
    if (!both) ::usleep(100 * 1000);
  }
  std::vector<bool> alive;
  for (int pid : pids)
    alive.push_back(::kill(pid, 0) == 0);
  for (int pid : pids)
    ::kill(pid, SIGTERM);
  for (int pid : pids) {
    for (int tries = 0; tries < 50 && ::kill(pid, 0) == 0; ++tries)
      ::usleep(100 * 1000);
    if (::kill(pid, 0) == 0) ::kill(pid, SIGKILL);
  }
  std::system(("psql -q '" + url + "' -c 'DROP SCHEMA " + schema + " CASCADE' >/dev/null").c_str());
  EXPECT_TRUE(alive[0] && alive[1]) << "a panel exited while starting";
  EXPECT_TRUE(both) << "both panels answer /healthz";
}

// ---- holdfast logs: its snapshot copy and what it prints -----------------------------------

// A folder of the test's own: a SQLite file with a logs table, and tmp/, the TMPDIR the
// snapshot copy goes to.
}  // namespace
