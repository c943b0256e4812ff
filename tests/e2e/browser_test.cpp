// A real browser (headless Chromium, Debian's `chromium`) opens the schedule page while a
// lock burst blocks the database's readers: the page it shows is the schedule. The
// screenshot is kept as a test artifact (HOLDFAST_TEST_ARTIFACTS, printed by the test).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "panel_fixture.hpp"

extern char** environ;

namespace holdfast::panel {
namespace {

using BrowserTest = PanelFixture;

std::string chromium_path() {
  if (const char* env = std::getenv("HOLDFAST_CHROMIUM"); env != nullptr && *env != '\0') {
    return env;
  }
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct ProcessRun {
  int exit_code = -1;  // -1: did not finish in time (its process group was killed)
  std::string out;
  std::string err;
};

// Runs `argv` in its own process group with stdout and stderr to files; stops the whole
// group (Chromium starts helpers) if it takes longer than `limit`.
ProcessRun run_process(const std::vector<std::string>& argv, const fs::path& out,
                       const fs::path& err, std::chrono::seconds limit) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &files, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ProcessRun run;
  if (spawned != 0) {
    run.err = "posix_spawn failed: " + std::string(std::strerror(spawned));
    return run;
  }
  const auto deadline = Steady::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (Steady::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);  // helpers left behind by a finished browser, if any
  run.out = read_file(out);
  run.err = read_file(err);
  return run;
}

TEST_F(BrowserTest, DuringALockBurstTheSchedulePageShowsTheSchedule) {
  const std::string chromium = chromium_path();
  if (chromium.empty()) {
    if (const char* ci = std::getenv("CI"); ci != nullptr && std::string(ci) == "true") {
      FAIL() << "chromium is not installed; scripts/install-deps.sh installs it "
                "(scripts/extra-packages.txt)";
    }
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  }
  const fs::path artifacts = HOLDFAST_TEST_ARTIFACTS;
  fs::create_directories(artifacts);
  const fs::path screenshot = artifacts / "schedule-during-lock-burst.png";
  fs::remove(screenshot);

  auto user = store_->user_id_by_email("Ada.Nowak@club.example");
  ASSERT_TRUE(user.ok() && user->has_value());
  const std::string base = "http://127.0.0.1:" + std::to_string(server_->port());
  const std::string page = "/dashboard/schedule?date=" + today();
  // One sign-in link per browser run: a link works once.
  const std::string dom_url = base + server_->issue_sign_in_link(**user, page);
  const std::string shot_url = base + server_->issue_sign_in_link(**user, page);
  const auto browser = [&](std::string_view name, std::vector<std::string> extra,
                           const std::string& url) {
    std::vector<std::string> argv = {chromium,
                                     "--headless",
                                     "--no-sandbox",  // we run as root in CI
                                     "--disable-gpu",
                                     "--disable-dev-shm-usage",
                                     "--no-first-run",
                                     "--user-data-dir=" + (dir_ / name).string(),
                                     "--window-size=1280,900"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    return run_process(argv, dir_ / (std::string(name) + ".out"),
                       dir_ / (std::string(name) + ".err"), seconds(90));
  };

  // Readers are blocked (exclusive locking mode) for 3 s while both browsers load the page.
  auto lock = storm(StormKind::kRead);
  ASSERT_TRUE(lock->held());
  const auto locked_at = Steady::now();
  std::thread release([&] {
    std::this_thread::sleep_for(seconds(3));
    lock->end();
  });
  auto dom =
      std::async(std::launch::async, [&] { return browser("dom", {"--dump-dom"}, dom_url); });
  auto shot = std::async(std::launch::async, [&] {
    return browser("shot", {"--screenshot=" + screenshot.string(), "--hide-scrollbars"}, shot_url);
  });
  const ProcessRun d = dom.get();
  const ProcessRun s = shot.get();
  release.join();
  std::printf("[   INFO   ] screenshot: %s\n", screenshot.c_str());

  ASSERT_EQ(d.exit_code, 0) << d.err;
  // The browser followed the link, got the session cookie, and was shown the schedule —
  // fresh, not the stale copy — after waiting inside its window for the lock to go.
  EXPECT_NE(d.out.find("Schedule for " + today()), std::string::npos) << d.out.substr(0, 2000);
  EXPECT_NE(d.out.find("data-game="), std::string::npos);
  EXPECT_EQ(d.out.find("This schedule is as of"), std::string::npos) << "a stale copy was shown";
  EXPECT_GE(Steady::now() - locked_at, seconds(3));

  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string png = read_file(screenshot);
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(png.size(), 20'000u) << "a blank page compresses to a few kB";
}

}  // namespace
}  // namespace holdfast::panel
