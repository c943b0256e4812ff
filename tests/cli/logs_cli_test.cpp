// `holdfast logs` as a user runs it: what it reads, what it copies, and that a copy never
// outlives the command (a closed pipe, a signal).
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"

namespace {

using namespace cli_test;  // NOLINT(google-build-using-namespace): the tests' helpers

class LogsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("holdfast-cli-logs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tmp");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The logs table with `rows` rows of `message` (a row number in front when rows > 1).
  std::string make_db(int rows, const std::string& message) {
    const std::string path = (dir_ / "club.db").string();
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db,
                           "CREATE TABLE logs (id INTEGER PRIMARY KEY, level TEXT NOT NULL, "
                           "context TEXT NOT NULL, message TEXT NOT NULL, created_at TEXT NOT "
                           "NULL); BEGIN",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db,
                                 "INSERT INTO logs (level, context, message, created_at) VALUES "
                                 "('WARN', 'payments', ?1, '2026-01-01T00:00:00.000Z')",
                                 -1, &st, nullptr),
              SQLITE_OK);
    for (int i = 0; i < rows; ++i) {
      const std::string text = rows > 1 ? std::to_string(i) + " " + message : message;
      sqlite3_bind_text(st, 1, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
      EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
      sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    EXPECT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    return path;
  }
  // What is left in TMPDIR.
  std::vector<std::string> left_in_tmp() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "tmp"))
      names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

// Megabytes of rows: far more than a pipe holds, so the command is still printing when its
// reader goes away.
constexpr int kManyRows = 20000;
const std::string kLongMessage(200, 'x');

TEST_F(LogsCli, TheSnapshotCopyIsRemovedWhenTheReaderClosesThePipe) {
  const std::string db = make_db(kManyRows, kLongMessage);
  const std::string cmd = "TMPDIR=" + (dir_ / "tmp").string() + " timeout 60 " +
                          std::string(HOLDFAST_BIN) + " logs --db " + db +
                          " --limit 1000000 | head -1";
  const std::string first = shell_output(cmd);
  EXPECT_NE(first.find("[payments]"), std::string::npos) << first;
  EXPECT_EQ(std::count(first.begin(), first.end(), '\n'), 0) << first;
  EXPECT_TRUE(left_in_tmp().empty()) << "left behind: " << left_in_tmp().front();
}

TEST_F(LogsCli, TheSnapshotCopyIsRemovedOnSigintSigtermAndSighup) {
  const std::string db = make_db(kManyRows, kLongMessage);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(::strsignal(sig));
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    const std::string tmpdir = (dir_ / "tmp").string();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE})
        ::signal(s, SIG_DFL);
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      ::setenv("TMPDIR", tmpdir.c_str(), 1);
      ::execl(HOLDFAST_BIN, HOLDFAST_BIN, "logs", "--db", db.c_str(), "--limit", "1000000",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    // Nobody reads the pipe: once the copy exists, the command fills the pipe and waits
    // there with the copy on disk, until the signal comes.
    bool copied = false;
    for (int tries = 0; tries < 3000 && !copied; ++tries) {
      copied = !left_in_tmp().empty();
      if (!copied) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(copied) << "no snapshot copy appeared in TMPDIR";
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::close(out[0]);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
        << "it should end as the signal ends it; status " << status;
    EXPECT_TRUE(left_in_tmp().empty()) << "left behind: " << left_in_tmp().front();
  }
}

TEST_F(LogsCli, ControlBytesInARowArePrintedEscaped) {
  // ESC sequences that would recolour the terminal, a CR that would overwrite the line, a
  // newline that would fake a row, a C1 CSI, a byte that is not UTF-8; a tab and UTF-8 stay.
  const std::string db =
      make_db(1, "a\x1b[31mred\rover\nfake row\tok \\ \x7f\x01 \xc2\x9b \xff Zdzis\xc5\x82\x61w");
  const std::string out = shell_output("TMPDIR=" + (dir_ / "tmp").string() + " " +
                                       std::string(HOLDFAST_BIN) + " logs --db " + db);
  EXPECT_EQ(out,
            "2026-01-01T00:00:00.000Z WARN  [payments] "
            "a\\x1b[31mred\\rover\\nfake row\tok \\\\ \\x7f\\x01 \\u009b \\xff Zdzis\xc5\x82\x61w");
  EXPECT_TRUE(left_in_tmp().empty());
}

TEST_F(LogsCli, ASmallLimitReadsTheRowsItPrintsFromTheFileAndCopiesNothing) {
  const std::string db = make_db(kManyRows, kLongMessage);  // megabytes
  // Every file created in TMPDIR while the command runs (the kernel queues the events).
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, (dir_ / "tmp").c_str(), IN_CREATE | IN_MOVED_TO), 0);
  const std::string err = (dir_ / "err.txt").string();
  const std::string out =
      shell_output("TMPDIR=" + (dir_ / "tmp").string() + " timeout 60 " +
                   std::string(HOLDFAST_BIN) + " logs --db " + db + " --limit 3 2>" + err);
  alignas(inotify_event) char events[4096];
  const ssize_t n = ::read(watch, events, sizeof(events));
  ::close(watch);
  EXPECT_LE(n, 0) << "it created a file in TMPDIR: "
                  << (n > 0 ? reinterpret_cast<inotify_event*>(events)->name : "");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;  // three lines, trimmed
  EXPECT_NE(out.find(std::to_string(kManyRows - 1) + " " + kLongMessage), std::string::npos)
      << "the newest row first (same time: the highest id)";
  std::stringstream said;
  said << std::ifstream(err).rdbuf();
  EXPECT_EQ(said.str(), "");
}

TEST_F(LogsCli, AboveTheDirectReadLimitItSaysHowManyBytesItCopiesBeforeCopying) {
  const std::string db = make_db(kManyRows, kLongMessage);
  const std::string said = shell_output("TMPDIR=" + (dir_ / "tmp").string() + " timeout 60 " +
                                        std::string(HOLDFAST_BIN) + " logs --db " + db +
                                        " --limit 20000 2>&1 >/dev/null");
  EXPECT_NE(said.find("copying '" + db + "' (about " + std::to_string(fs::file_size(db)) +
                      " bytes) into " + (dir_ / "tmp").string() + "/holdfast-logs-"),
            std::string::npos)
      << said;
  EXPECT_TRUE(left_in_tmp().empty());
}

}  // namespace
