// `holdfast sim` as a command: its JSON (fields, determinism), its SVG and its errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace holdfast::cli {
void add_sim_command(CLI::App& app);
}

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SimCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("holdfast-sim-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `holdfast sim ARGS` (a small, fast stage unless ARGS say otherwise).
  void sim(std::vector<std::string> args) {
    std::vector<std::string> all = {"holdfast",  "sim", "--duration",    "40s",  "--rps",     "250",
                                    "--workers", "2",   "--queue-limit", "2500", "--clients", "2"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all)
      argv.push_back(a.data());
    CLI::App app;
    holdfast::cli::add_sim_command(app);
    app.parse(static_cast<int>(argv.size()), argv.data());
  }
  fs::path dir_;
};

TEST_F(SimCommand, TheJsonHasTheAgreedFieldsForEveryStrategy) {
  const fs::path out = dir_ / "out.json";
  sim({"--scenario", "capacity-drop", "--strategies", "none,naive,holdfast", "--json", out.string(),
       "--metastable-after", "5s", "--recovery-hold", "3s"});
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(doc["scenario"]["name"], "capacity-drop");
  EXPECT_EQ(doc["scenario"]["offered_rps"], 250.0);
  const auto& list = doc["strategies"];
  ASSERT_EQ(list.size(), 3u);
  for (const auto& s : list) {
    for (const char* key : {"name", "recovery_s", "metastable", "amplification_max",
                            "amplification_during_trigger", "goodput_during_trigger", "errors"}) {
      EXPECT_TRUE(s.contains(key)) << s["name"] << " lacks " << key;
    }
    EXPECT_EQ(s["seconds"]["goodput"].size(), 40u);
    // recovery_s is null exactly when there was no recovery.
    if (s["metastable"].get<bool>()) {
      EXPECT_TRUE(s["recovery_s"].is_null());
    }
    if (!s["recovery_s"].is_null()) {
      EXPECT_FALSE(s["metastable"].get<bool>());
    }
  }
  EXPECT_EQ(list[0]["name"], "none");
  EXPECT_FALSE(list[0]["recovery_s"].is_null());
  EXPECT_EQ(list[1]["name"], "naive");
  EXPECT_TRUE(list[1]["metastable"].get<bool>());
  EXPECT_TRUE(list[1]["recovery_s"].is_null());
  EXPECT_DOUBLE_EQ(list[1]["amplification_max"].get<double>(), 4.0);
}

TEST_F(SimCommand, TheHangScenarioReportsFailuresRecoveryAndAmplificationForEveryStrategy) {
  const fs::path out = dir_ / "hang.json";
  sim({"--scenario", "hang", "--trigger-start", "10s", "--metastable-after", "15s",
       "--recovery-hold", "3s", "--json", out.string()});
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(doc["scenario"]["name"], "hang");
  EXPECT_EQ(doc["scenario"]["trigger"]["kind"], "hang");
  const auto& list = doc["strategies"];
  ASSERT_EQ(list.size(), 4u);
  for (const auto& s : list) {
    for (const char* key : {"failed_p50_ms", "failed_p99_ms", "recovery_s",
                            "amplification_during_trigger", "p99_during_trigger_ms", "p999_ms"}) {
      EXPECT_TRUE(s.contains(key)) << s["name"] << " lacks " << key;
    }
    // Every strategy failed requests during the hang (a silent database serves nobody).
    EXPECT_GT(s["errors"].get<int>(), 0) << s["name"];
    EXPECT_TRUE(s["efficiency"].is_null()) << "no capacity during a hang: no efficiency";
  }
  // Without retry, a request sent into the silence fails at its 1 s timeout.
  EXPECT_NEAR(list[0]["failed_p50_ms"].get<double>(), 1000.0, 20.0);
  EXPECT_EQ(list[3]["name"], "holdfast");
  EXPECT_EQ(list[3]["breakers"], 2);
  EXPECT_TRUE(list[3]["breaker_open_after_s"].is_array());
  // --trigger hang over another scenario's stage is the same trigger.
  const fs::path other = dir_ / "other.json";
  sim({"--scenario", "outage", "--trigger", "hang", "--strategies", "none", "--json",
       other.string()});
  EXPECT_EQ(nlohmann::json::parse(slurp(other))["scenario"]["trigger"]["kind"], "hang");
}

TEST_F(SimCommand, TheSameSeedWritesByteIdenticalJson) {
  const std::vector<std::string> common = {"--scenario", "outage", "--strategies",
                                           "none,naive,backoff,holdfast:health=500ms"};
  auto with = [&](std::string file, std::string seed) {
    std::vector<std::string> args = common;
    for (std::string a :
         {std::string("--seed"), seed, std::string("--json"), (dir_ / file).string()}) {
      args.push_back(a);
    }
    sim(args);
    // Everything but the wall time of each strategy.
    std::string text = slurp(dir_ / file);
    std::string out;
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      const std::string_view line(text.data() + at, end - at);
      if (line.find("\"wall_s\"") == std::string_view::npos) out.append(line).push_back('\n');
      at = end + 1;
    }
    return out;
  };
  const std::string a = with("a.json", "7");
  const std::string b = with("b.json", "7");
  const std::string c = with("c.json", "8");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(SimCommand, TheSvgPlotsGoodputAndAmplificationPerStrategy) {
  const fs::path out = dir_ / "out.svg";
  sim({"--scenario", "spike", "--strategies", "none,holdfast", "--svg", out.string()});
  const std::string svg = slurp(out);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("goodput"), std::string::npos);
  EXPECT_NE(svg.find("amplification"), std::string::npos);
  EXPECT_NE(svg.find(">spike active<"), std::string::npos);
  EXPECT_NE(svg.find(">none<"), std::string::npos);
  EXPECT_NE(svg.find(">holdfast<"), std::string::npos);
}

TEST_F(SimCommand, OverridesReachTheScenario) {
  const fs::path out = dir_ / "out.json";
  sim({"--scenario", "brownout", "--failure-ratio", "0.5", "--trigger-start", "5s",
       "--trigger-length", "3s", "--timeout", "250ms", "--distribution", "lognormal",
       "--strategies", "none", "--json", out.string()});
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));
  const auto& sc = doc["scenario"];
  EXPECT_EQ(sc["trigger"]["failure_ratio"], 0.5);
  EXPECT_EQ(sc["trigger"]["start_s"], 5.0);
  EXPECT_EQ(sc["trigger"]["length_s"], 3.0);
  EXPECT_EQ(sc["attempt_timeout_s"], 0.25);
  EXPECT_EQ(sc["distribution"], "lognormal");
  EXPECT_EQ(sc["workers"], 2);
  // Half the attempts of seconds 5..7 failed, and none otherwise.
  const auto& errors = doc["strategies"][0]["seconds"]["errors"];
  EXPECT_GT(errors[6].get<int>(), 80);
  EXPECT_EQ(errors[12].get<int>(), 0);
}

TEST_F(SimCommand, MistakesAreReportedAsCommandLineErrors) {
  EXPECT_THROW(sim({"--scenario", "meteor"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--strategies", "none,tenacity"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--service", "soon"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--sigma", "9"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--threshold", "0"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--threshold", "2000000"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--max-attempts", "5000"}), CLI::ValidationError);
  EXPECT_THROW(sim({"--health-probe", "0.001ms"}), CLI::ValidationError);
  try {
    sim({"--trigger", "meteor"});
    FAIL() << "no error";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("meteor"), std::string::npos);
  }
}

TEST_F(SimCommand, WithAMixTheJsonHasEachClassServedShareAndP99) {
  const fs::path out = dir_ / "mix.json";
  sim({"--scenario", "spike", "--strategies", "none,holdfast", "--mix",
       "critical:0.1,normal:0.8,background:0.1", "--json", out.string()});
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));
  EXPECT_DOUBLE_EQ(doc["scenario"]["class_mix"]["critical"].get<double>(), 0.1);
  for (const auto& s : doc["strategies"]) {
    ASSERT_TRUE(s.contains("classes")) << s["name"];
    for (const char* c : {"critical", "normal", "background"}) {
      ASSERT_TRUE(s["classes"].contains(c)) << s["name"] << " " << c;
      EXPECT_TRUE(s["classes"][c]["served_pct"].is_number());
      EXPECT_TRUE(s["classes"][c]["p99_ms"].is_number());
      EXPECT_GT(s["classes"][c]["requests"].get<int>(), 0);
    }
  }
  const fs::path plain = dir_ / "plain.json";
  sim({"--scenario", "spike", "--strategies", "holdfast", "--json", plain.string()});
  EXPECT_FALSE(nlohmann::json::parse(slurp(plain))["strategies"][0].contains("classes"));
  try {
    sim({"--mix", "critical:0.1,normal:0.8"});
    FAIL() << "no error";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("--mix"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sum to 0.9"), std::string::npos) << e.what();
  }
}

TEST_F(SimCommand, AnUnwritableOutputIsARuntimeError) {
  EXPECT_THROW(sim({"--strategies", "none", "--json", (dir_ / "no" / "such" / "x.json").string()}),
               CLI::RuntimeError);
}

}  // namespace
