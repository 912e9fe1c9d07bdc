// `infrarsi init --from`: reading a user's batch script, and the contract drafted from it, which init must
// accept once the lines the draft marks are filled in.
#include "campaign/campaign.hpp"
#include "contract/batch_script.hpp"
#include "contract/contract.hpp"
#include "contract/draft.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
const fs::path fixtures = INFRARSI_FIXTURES;
const fs::path torchgpt = fixtures.parent_path().parent_path() / "workloads" / "torchgpt";

std::string read(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() /
               ("infrarsi-draft-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    static inline int counter = 0;
};

bool has_line(const std::string& text, const std::string& start) {
    return text.rfind(start, 0) == 0 || text.find("\n" + start) != std::string::npos;
}

// The draft with every placeholder on a `key = "FILL-IN"` line replaced by the value given for that key.
std::string fill(std::string text, const std::map<std::string, std::string>& values) {
    for (const auto& [key, value] : values) {
        const std::string from = key + " = \"" + contract::draft_placeholder + "\"";
        const auto pos = text.find(from);
        REQUIRE_MESSAGE(pos != std::string::npos, from);
        text.replace(pos, from.size(), key + " = " + value);
    }
    return text;
}
} // namespace

TEST_CASE("a Megatron-style script: #SBATCH options, srun + torchrun, variables and arrays expanded") {
    const auto s =
        contract::read_batch_script(read(fixtures / "scripts" / "megatron-gpt.sbatch"), "megatron");
    CHECK(s.sbatch.at("nodes") == "2");
    CHECK(s.sbatch.at("ntasks-per-node") == "1");
    CHECK(s.sbatch.at("gres") == "gpu:8");
    CHECK(s.sbatch.at("cpus-per-task") == "32"); // the trailing comment is not a value
    CHECK(s.sbatch.at("time") == "24:00:00");
    CHECK(s.sbatch.at("job-name") == "gpt-345m");
    CHECK(s.sbatch.count("exclusive") == 1);
    CHECK(s.launcher == "torchrun");
    REQUIRE(s.srun.size() == 2);
    CHECK(s.srun[0] == "srun");
    CHECK(s.program == "pretrain_gpt.py");
    CHECK(s.launcher_option("--nproc_per_node") == "8"); // GPUS_PER_NODE=8, from the array
    CHECK(s.launcher_option("--rdzv-endpoint").value_or("").find(":6000") != std::string::npos);
    CHECK(s.forwards_arguments);
    auto arg = [&](const std::string& name) -> const contract::ProgramArg* {
        for (const auto& a : s.program_args)
            if (a.name == name) return &a;
        return nullptr;
    };
    REQUIRE(arg("--micro-batch-size"));
    CHECK(arg("--micro-batch-size")->value == "4");
    CHECK(arg("--train-iters")->value == "500000");
    CHECK(arg("--bf16")->flag);
    CHECK(arg("--recompute-granularity")->value == "selective");
    CHECK(arg("--data-path")->value == "/lustre/project/data/my-gpt2_text_document");
    CHECK(arg("--save")->value == "/lustre/project/ckpt/gpt-345m");
}

TEST_CASE("a script is read as a shell would: quotes, continuations, comments, exec and env prefixes") {
    const auto s = contract::read_batch_script("#!/bin/bash\n"
                                               "#SBATCH --mem 8G\n"
                                               "#SBATCH -c4\n"
                                               "echo start   # python not-this.py\n"
                                               "#SBATCH --nodes=9\n" // after a command: sbatch ignores it
                                               "ARGS='--lr 1e-3'\n"
                                               "OMP_NUM_THREADS=4 exec python3 -u 'my train.py' \\\n"
                                               "   --batch_size=\"16\" $ARGS --name \"a b\" ${@}\n",
                                               "inline");
    CHECK(s.sbatch.at("mem") == "8G");
    CHECK(s.sbatch.at("cpus-per-task") == "4");
    CHECK(s.sbatch.count("nodes") == 0);
    CHECK(s.launch_line == 7);
    CHECK(s.launcher == "python");
    CHECK(s.program == "my train.py");
    REQUIRE(s.program_args.size() == 3);
    CHECK(s.program_args[0].value == "16");
    CHECK(s.program_args[1].name == "--lr");
    CHECK(s.program_args[1].value == "1e-3");
    CHECK(s.program_args[2].value == "a b");
    CHECK(s.forwards_arguments);
}

TEST_CASE("a script that launches nothing the reader knows, or is no text, is refused with the reason") {
    TempDir d;
    std::ofstream(d.path / "none.sbatch") << "#!/bin/bash\n#SBATCH --mem=1G\necho hello\n";
    contract::DraftOptions o;
    o.script = d.path / "none.sbatch";
    o.output = d.path / "none.contract.toml";
    CHECK_THROWS_WITH_AS(contract::draft_contract(o), doctest::Contains("found no launch"), Error);
    CHECK_THROWS_WITH_AS(contract::read_batch_script(std::string("#!/bin/bash\0x", 14), "bin"),
                         doctest::Contains("NUL"), Error);
    o.script = d.path / "absent.sbatch";
    CHECK_THROWS_AS(contract::draft_contract(o), Error);
}

TEST_CASE("torchgpt's job script drafts a contract init accepts as written, the format read from a sample") {
    TempDir d;
    for (const char* f : {"job.sbatch", "train.py"})
        fs::copy_file(torchgpt / f, d.path / f);
    contract::DraftOptions o;
    o.script = d.path / "job.sbatch";
    o.output = d.path / "job.contract.toml";
    o.sample_log = read(fixtures / "logs" / "nanogpt.log");
    o.sample_log_name = "nanogpt.log";
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(draft.placeholders == 0);
    CHECK(draft.checks > 5);
    CHECK(draft.notes.empty());
    CHECK(has_line(draft.text, "format = \"nanogpt\""));
    CHECK(has_line(draft.text, "[knobs.micro_batch]"));
    CHECK(has_line(draft.text, "arg = \"--batch_size={}\""));
    CHECK(has_line(draft.text, "[knobs.grad_accum]"));
    CHECK(has_line(draft.text, "[knobs.ranks_per_node]"));
    CHECK(has_line(draft.text, "sbatch_option = \"--ntasks-per-node\""));
    CHECK(has_line(draft.text, "product = [\"micro_batch\", \"grad_accum\", \"ranks_per_node\"]"));
    CHECK(has_line(draft.text, "global_batch = 16"));
    // The script's own 12 iterations are shorter than a trial's 20: nothing appended, 12 steps.
    CHECK(draft.text.find("args = [") == std::string::npos);
    CHECK(has_line(draft.text, "steps = 12"));
    CHECK(has_line(draft.text, "mem = \"3000M\""));
    CHECK(has_line(draft.text, "source = \".\""));
    contract::write_draft(o.output, draft);
    // Never over a file that exists (the user's own contract).
    CHECK_THROWS_WITH_AS(contract::write_draft(o.output, draft), doctest::Contains("exists"), Error);

    const auto c = contract::load(o.output);
    CHECK(c.space.knobs.size() == 3);
    CHECK(c.metrics.kind == measure::LogFormatKind::NanoGpt);
    CHECK(c.resources.mem_bytes == 3000ll << 20);
    TempDir campaigns; // outside the source tree, which init locks
    campaign::Campaign::init(o.output, campaigns.path / "c");
    CHECK(campaign::Campaign(campaigns.path / "c").contract().name == "job");
}

TEST_CASE("a nanoGPT sample that prints iter 0 to max_iters: the draft's steps count that line more, and "
          "its loss mode is marked for a random batch per micro-step") {
    TempDir d;
    std::ofstream(d.path / "job.sbatch")
        << "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --mem=3000M\n"
           "cd \"$(dirname \"$0\")\"\n"
           "exec python train.py --batch_size=8 --gradient_accumulation_steps=2 "
           "--max_iters=600 \"$@\"\n";
    std::ofstream(d.path / "train.py") << "print('iter')\n";
    std::string sample;
    for (int i = 0; i <= 600; ++i)
        sample += "iter " + std::to_string(i) + ": loss 4.1, time 40.00ms, mfu -100.00%\n";
    contract::DraftOptions o;
    o.script = d.path / "job.sbatch";
    o.output = d.path / "job.contract.toml";
    o.sample_log = sample;
    o.sample_log_name = "sample.out";
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(has_line(draft.text, "args = [\"--max_iters=20\"]"));
    CHECK(has_line(draft.text, "steps = 21"));                                     // iter 0 .. iter 20
    CHECK(has_line(draft.text, "loss_mode = \"last_k_mean\"   # CHECK: nanoGPT")); // final_eval, with a seed
    CHECK(draft.text.find("final_eval") != std::string::npos);
}

TEST_CASE("the Megatron draft marks what the script does not say, and init accepts it once filled in") {
    TempDir d;
    fs::copy_file(fixtures / "scripts" / "megatron-gpt.sbatch", d.path / "megatron-gpt.sbatch");
    fs::create_directories(d.path / "contracts");
    contract::DraftOptions o;
    o.script = d.path / "megatron-gpt.sbatch";
    o.output = d.path / "contracts" / "gpt.contract.toml";
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(draft.placeholders == 2); // mem (no --mem) and the log format (no sample, no --format)
    CHECK(has_line(draft.text, "source = \"..\""));
    CHECK(has_line(draft.text, "sbatch_script = \"../megatron-gpt.sbatch\""));
    CHECK(has_line(draft.text, "arg = \"--micro-batch-size={}\""));
    CHECK(has_line(draft.text, "arg = \"--tensor-model-parallel-size={}\""));
    CHECK(has_line(draft.text, "args = [\"--train-iters=20\"]"));
    CHECK(has_line(draft.text, "values = [\"selective\", \"full\"]"));
    // The GPUs from --gres, --exclusive as the script has it; the job name is the campaign's.
    CHECK(has_line(draft.text, "sbatch_args = [\"--gpus-per-node=8\", \"--exclusive\"]"));
    CHECK(has_line(draft.text, "# not carried from #SBATCH --job-name (line 4)"));
    // Its MASTER_PORT=6000 would make two trials on one node collide.
    CHECK(has_line(draft.text, "# CHECK: a fixed rendezvous port 6000 (line 17)"));
    CHECK(has_line(draft.text, "nodes = 2"));
    CHECK(has_line(draft.text, "seed = 1234"));
    // torchrun's --nproc_per_node is a literal 8 here: said, not made a knob.
    CHECK(draft.text.find("is fixed in the script") != std::string::npos);
    CHECK(draft.text.find("[knobs.ranks_per_node]") == std::string::npos);
    CHECK(draft.text.find("[[constraints]]") == std::string::npos); // Megatron derives the accumulation
    contract::write_draft(o.output, draft);
    // As drafted, init refuses it at the first value to fill in, naming the line.
    CHECK_THROWS_WITH_AS(contract::load(o.output), doctest::Contains("gpt.contract.toml:"), Error);

    std::ofstream(o.output) << fill(draft.text, {{"mem", "\"64G\""}, {"format", "\"megatron\""}});
    const auto c = contract::load(o.output);
    CHECK(c.metrics.kind == measure::LogFormatKind::Megatron);
    CHECK(c.resources.nodes == 2);
    CHECK(c.invariants.steps == 20);
    TempDir campaigns;
    campaign::Campaign::init(o.output, campaigns.path / "c");
    CHECK(campaign::Campaign(campaigns.path / "c").contract().name == "megatron-gpt");
}

TEST_CASE("a script that does not pass its arguments on gets a note: knobs as arguments cannot reach it") {
    TempDir d;
    std::ofstream(d.path / "plain.sbatch")
        << "#!/bin/bash\n#SBATCH --mem=2G\n"
           "python train.py --batch_size 8 --gradient_accumulation_steps 2\n";
    contract::DraftOptions o;
    o.script = d.path / "plain.sbatch";
    o.output = d.path / "plain.contract.toml";
    o.format = measure::LogFormatKind::KeyValue;
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    REQUIRE(draft.notes.size() == 1);
    CHECK(draft.notes[0].find("\"$@\"") != std::string::npos);
    CHECK(has_line(draft.text, "format = \"key-value\""));
    CHECK(draft.placeholders == 1); // the step count
    CHECK(has_line(draft.text, "product = [\"micro_batch\", \"grad_accum\"]"));
}

TEST_CASE(
    "torchgpt's contract loads: knobs as arguments and as an sbatch option, its log read as nanoGPT's") {
    const auto c = contract::load(torchgpt / "torchgpt.contract.toml");
    CHECK(c.metrics.kind == measure::LogFormatKind::NanoGpt);
    CHECK(c.workload.build.empty()); // a Python job: nothing to build
    CHECK(c.space.knobs.size() == 8);
    CHECK(c.resources.mem_bytes == 520ll << 20);
    // Its captured output (torchrun, two ranks): twelve steps; the banner and the final evaluation are no
    // step.
    const auto log = measure::parse_log(read(fixtures / "logs" / "torchgpt.log"), c.metrics);
    REQUIRE(log.steps.size() == 12);
    CHECK(log.steps.front().step == 0);
    CHECK(log.steps.back().step == 11);
    CHECK(log.steps.back().loss == doctest::Approx(3.9857));
    CHECK(log.steps.back().step_time_s > 0);
}

TEST_CASE(
    "words of a hostile script cannot put keys into the draft: a newline in an argument stays a comment") {
    TempDir d;
    std::ofstream(d.path / "evil.sbatch") << "#!/bin/bash\n#SBATCH --mem=2G\n"
                                             "torchrun --nproc_per_node=\"4\n[budget]\ntrials = 1\" train.py "
                                             "--batch_size 8 --max_iters 5 \"$@\"\n";
    contract::DraftOptions o;
    o.script = d.path / "evil.sbatch";
    o.output = d.path / "evil.contract.toml";
    o.format = measure::LogFormatKind::NanoGpt;
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(draft.text.find("\ntrials = 1\n") == std::string::npos);
    contract::write_draft(o.output, draft);
    CHECK(contract::load(o.output).budget.trials == 12);
}

TEST_CASE("a framework's sample picks its format, torchtitan's too: a given --format is checked against the "
          "sample, the step lines it cannot read are named with the first") {
    TempDir d;
    std::ofstream(d.path / "job.sbatch")
        << "#!/bin/bash\n#SBATCH --mem=8G\n"
           "torchrun --nproc_per_node=8 train.py --training.steps 1000 \"$@\"\n";
    contract::DraftOptions o;
    o.script = d.path / "job.sbatch";
    o.output = d.path / "job.contract.toml";
    o.sample_log = read(fixtures / "logs" / "frameworks" / "torchtitan.log");
    o.sample_log_name = "titan.out";
    {
        const auto draft = contract::draft_contract(o);
        INFO(draft.text);
        CHECK(has_line(draft.text, "format = \"torchtitan\"   # CHECK: read 3 step lines of titan.out"));
        CHECK(draft.notes.empty());
    }
    // The format given does not read this sample: said in the draft and as a note, and the step-like
    // lines it leaves are counted, the first quoted.
    o.format = measure::LogFormatKind::Megatron;
    {
        const auto draft = contract::draft_contract(o);
        INFO(draft.text);
        CHECK(has_line(draft.text,
                       "format = \"megatron\"   # CHECK: given with --format, but it reads no step line"));
        CHECK(draft.text.find("# CHECK: 4 lines of titan.out look like step lines but the format does not "
                              "read them, the first: \"[rank0]:[titan]") != std::string::npos);
        REQUIRE(draft.notes.size() == 2);
        CHECK(draft.notes[0].find("--format megatron reads no step line of titan.out") != std::string::npos);
    }
    // Given and readable: the count is said.
    o.format = measure::LogFormatKind::Torchtitan;
    {
        const auto draft = contract::draft_contract(o);
        CHECK(has_line(draft.text,
                       "format = \"torchtitan\"   # CHECK: given with --format: read 3 step lines"));
        CHECK(draft.notes.empty());
    }
    // No format reads it: the placeholder, and its step-like lines named.
    o.format.reset();
    o.sample_log = "step 1 | my loss is 2.5\nstep 2 | my loss is 2.4\n";
    {
        const auto draft = contract::draft_contract(o);
        INFO(draft.text);
        CHECK(has_line(draft.text, "format = \"FILL-IN\""));
        CHECK(
            draft.text.find("2 lines of titan.out look like step lines but are not read, the first: \"step 1 "
                            "| my loss is 2.5\"") != std::string::npos);
    }
}

TEST_CASE("every #SBATCH line is accounted for: where a trial may run and whose allocation it is carried, "
          "what the campaign sets itself left out with why, an unknown option named") {
    TempDir d;
    std::ofstream(d.path / "site.sbatch")
        << "#!/bin/bash\n#SBATCH --nodes=1 --mem=8G\n#SBATCH -A proj42\n#SBATCH --qos=high\n"
           "#SBATCH -C a100\n#SBATCH --reservation=maint\n#SBATCH --exclusive\n#SBATCH --gpus-per-task=1\n"
           "#SBATCH -J mytrain\n#SBATCH -o out-%j.txt\n#SBATCH --mail-type=END\n#SBATCH --array=1-3\n"
           "#SBATCH --frobnicate=yes\n"
           "python train.py --batch_size 8 \"$@\"\n";
    contract::DraftOptions o;
    o.script = d.path / "site.sbatch";
    o.output = d.path / "site.contract.toml";
    o.format = measure::LogFormatKind::KeyValue;
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(has_line(draft.text, "sbatch_args = [\"--account=proj42\", \"--constraint=a100\", \"--exclusive\", "
                               "\"--gpus-per-task=1\", \"--qos=high\", \"--reservation=maint\"]"));
    CHECK(has_line(draft.text, "# not carried from #SBATCH --job-name (line 9): each trial's job is named"));
    CHECK(has_line(draft.text, "# not carried from #SBATCH --output (line 10): the campaign keeps"));
    CHECK(has_line(draft.text, "# not carried from #SBATCH --mail-type (line 11): "));
    CHECK(has_line(draft.text, "# not carried from #SBATCH --array (line 12): the campaign submits its own"));
    CHECK(has_line(draft.text,
                   "# not carried from #SBATCH --frobnicate (line 13): not an option the draft knows"));
    bool noted = false;
    for (const auto& n : draft.notes)
        noted = noted || n.find("1 #SBATCH option(s) the draft does not know") != std::string::npos;
    CHECK(noted);
    // The carried options reach the contract as its sbatch options.
    contract::write_draft(o.output, draft);
    std::ofstream(o.output) << fill(draft.text, {{"steps", "20"}});
    const auto c = contract::load(o.output);
    CHECK(std::find(c.resources.sbatch_args.begin(), c.resources.sbatch_args.end(), "--account=proj42") !=
          c.resources.sbatch_args.end());
}

TEST_CASE(
    "a script without #SBATCH lines gets nodes and GPUs to fill in and a note, the draft's loader names "
    "every value to fill in at once") {
    TempDir d;
    std::ofstream(d.path / "bare.sh")
        << "#!/bin/bash\ntorchrun --nproc_per_node=8 train.py --batch_size 8 \"$@\"\n";
    contract::DraftOptions o;
    o.script = d.path / "bare.sh";
    o.output = d.path / "bare.contract.toml";
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(has_line(draft.text, "nodes = \"FILL-IN\""));
    CHECK(has_line(draft.text, "sbatch_args = [\"--gpus-per-node=FILL-IN\"]"));
    bool noted = false;
    for (const auto& n : draft.notes)
        noted = noted || n.find("no #SBATCH lines") != std::string::npos;
    CHECK(noted);
    contract::write_draft(o.output, draft);
    try {
        contract::load(o.output);
        FAIL("a draft with values to fill in was accepted");
    } catch (const Error& e) {
        const std::string what = e.what();
        CHECK(what.find(std::to_string(draft.placeholders) + " value(s) still to fill in") !=
              std::string::npos);
        CHECK(what.find("(resources.nodes)") != std::string::npos);
        CHECK(what.find("(resources.sbatch_args)") != std::string::npos);
        CHECK(what.find("(resources.mem)") != std::string::npos);
    }
}

TEST_CASE(
    "the traps an expert sees are named: another launch before the training, a loop of trainings, a fixed "
    "port, output redirected to a file, positional arguments, a step line every 100 steps") {
    TempDir d;
    std::ofstream(d.path / "traps.sbatch") << "#!/bin/bash\n#SBATCH --nodes=1 --mem=8G\n"
                                              "python prepare_data.py --out data/\n"
                                              "export MASTER_PORT=29500\n"
                                              "for lr in 1e-3 3e-4; do\n"
                                              "  srun torchrun --nproc_per_node=8 train.py --lr $lr "
                                              "--log-interval 100 --max_iters 5000 \"$@\" > "
                                              "train.log 2>&1\n"
                                              "done\n"
                                              "cp $1 results/\n";
    const auto s = contract::read_batch_script(read(d.path / "traps.sbatch"), "traps");
    CHECK(s.launch_line == 6);
    CHECK(s.launcher == "torchrun");
    CHECK(s.program == "train.py");
    CHECK(s.other_launch_lines == std::vector<int>{3});
    CHECK(s.launch_in_loop);
    CHECK(s.stdout_redirect == "train.log");
    CHECK(s.positional_lines == std::vector<int>{8});
    CHECK(s.fixed_port == "29500");
    CHECK(s.fixed_port_line == 4);
    for (const auto& w : s.program_words) // the redirection is the shell's, not an argument
        CHECK(w.find('>') == std::string::npos);

    contract::DraftOptions o;
    o.script = d.path / "traps.sbatch";
    o.output = d.path / "traps.contract.toml";
    o.format = measure::LogFormatKind::KeyValue;
    const auto draft = contract::draft_contract(o);
    INFO(draft.text);
    CHECK(has_line(draft.text, "args = [\"--max_iters=20\", \"--log-interval=1\"]"));
    CHECK(has_line(draft.text,
                   "# CHECK: the script launches a program on line(s) 3 too; the draft took line 6"));
    CHECK(has_line(draft.text, "# CHECK: the launch (line 6) is inside a loop"));
    CHECK(has_line(draft.text, "# CHECK: the launch (line 6) sends its output to train.log"));
    CHECK(has_line(draft.text, "# CHECK: the script reads its own arguments ($1..$9, line(s) 8)"));
    CHECK(has_line(draft.text, "# CHECK: a fixed rendezvous port 29500 (line 4)"));
    CHECK(draft.notes.size() >= 5);
}

TEST_CASE("a plain script has no traps named") {
    TempDir d;
    std::ofstream(d.path / "plain.sbatch") << "#!/bin/bash\n#SBATCH --nodes=1 --mem=8G\nsrun python train.py "
                                              "--batch_size 8 \"$@\" | tee log.txt\n";
    const auto s = contract::read_batch_script(read(d.path / "plain.sbatch"), "plain");
    CHECK(s.launch_line == 3);
    CHECK(s.other_launch_lines.empty());
    CHECK_FALSE(s.launch_in_loop);
    CHECK(s.stdout_redirect.empty());
    CHECK(s.positional_lines.empty());
    CHECK(s.fixed_port.empty());
}
