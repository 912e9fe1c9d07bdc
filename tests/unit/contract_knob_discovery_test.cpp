// The knobs a draft finds in a job script, in every launch style the frameworks' scripts use, with the values
// each program accepts and the way a trial's value reaches it. The scripts here are written for the tests in
// the styles of public launch scripts (scripts/corpus-score scores the real ones, tests/fixtures/scripts/
// corpus/SOURCES.md).
#include "contract/batch_script.hpp"
#include "contract/contract.hpp"
#include "contract/knob_discovery.hpp"
#include "space/space.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

using namespace infrarsi;
using namespace infrarsi::contract;

namespace {

KnobDiscovery discover(const std::string& script, DiscoveryContext ctx = {}) {
    return discover_knobs(read_batch_script(script, "job.sbatch"), ctx);
}

const SuggestedKnob* knob(const KnobDiscovery& d, const std::string& name) {
    for (const auto& k : d.knobs)
        if (k.name == name) return &k;
    return nullptr;
}

std::string all_names(const KnobDiscovery& d) {
    std::string s;
    for (const auto& k : d.knobs)
        s += k.name + " ";
    return s;
}

} // namespace

TEST_CASE("Megatron-LM's arrays, the += appends, flags and a variable the launch expands") {
    const auto d = discover("#!/bin/bash\n"
                            "MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-2}\n"
                            "TP=2\n"
                            "MODEL=(--num-layers 32 --bf16)\n"
                            "PAR=(\n  --tensor-model-parallel-size $TP\n  --sequence-parallel\n)\n"
                            "DDP=(--use-distributed-optimizer --overlap-grad-reduce)\n"
                            "TRAIN=(--micro-batch-size $MICRO_BATCH_SIZE --global-batch-size 64)\n"
                            "TRAIN+=(\"${DDP[@]}\")\n"
                            "DATA=()\n"
                            "if true; then\n  DATA+=(\n    \"--num-workers 2\"\n  )\nfi\n"
                            "torchrun --nproc_per_node 8 pretrain_gpt.py ${MODEL[@]} ${PAR[@]} ${TRAIN[@]} "
                            "${DATA[@]} --recompute-granularity selective --attention-backend fused\n",
                            {16, 8, std::nullopt});
    INFO(all_names(d));
    const auto* mb = knob(d, "micro_batch");
    REQUIRE(mb);
    CHECK(mb->env == "MICRO_BATCH_SIZE"); // from ${MICRO_BATCH_SIZE:-2}: the environment sets it, no edit
    CHECK(mb->edits.empty());
    CHECK(mb->baseline_number == 2);
    const auto* tp = knob(d, "tensor_parallel");
    REQUIRE(tp);
    CHECK(tp->kind == SuggestedKind::Pow2);
    CHECK(tp->max == 8); // within a node
    CHECK(tp->env == "TP");
    REQUIRE(tp->edits.size() == 1); // TP=2: the script fixes it
    CHECK(tp->edits[0].find("TP=${TP:-2}") != std::string::npos);
    for (const char* flag : {"sequence_parallel", "distributed_optimizer", "overlap_grad_reduce", "bf16"}) {
        INFO(flag);
        const auto* k = knob(d, flag);
        REQUIRE(k);
        CHECK(k->kind == SuggestedKind::Flag);
        CHECK(k->edits.size() == 1); // take it out of the launch, the knob adds it
    }
    REQUIRE(knob(d, "data_workers"));
    CHECK(knob(d, "data_workers")->min == 0);
    REQUIRE(knob(d, "recompute"));
    CHECK(knob(d, "recompute")->values == std::vector<std::string>{"selective", "full"});
    REQUIRE(knob(d, "attention_backend"));
    CHECK(knob(d, "attention_backend")->values.front() == "fused");
    CHECK(d.parallel_factors == std::vector<std::string>{"tensor_parallel"});
}

TEST_CASE("llm.c's short options through srun bash -c, and mpirun -np's value is not the program") {
    const auto d =
        discover("#!/bin/bash\n#SBATCH --nodes=2\n"
                 "export NCCL_IB_DISABLE=0\n"
                 "srun bash -c \"./train_gpt2cu -i data -b 32 -t 1024 -d 524288 -r 1 -z 1 -ge 1 -x "
                 "5000\"\n");
    INFO(all_names(d));
    const auto* b = knob(d, "micro_batch");
    REQUIRE(b);
    CHECK(b->arg == std::vector<std::string>{"-b", "{}"}); // two argv words: llm.c reads -b then its value
    REQUIRE(knob(d, "recompute"));
    CHECK(knob(d, "recompute")->values == std::vector<std::string>{"1", "0", "2"});
    REQUIRE(knob(d, "zero_stage"));
    CHECK(knob(d, "zero_stage")->values ==
          std::vector<std::string>{"1", "0"}); // its stages 2, 3 fall back to 0
    REQUIRE(knob(d, "gelu_fusion"));
    const auto* ib = knob(d, "nccl_ib_disable");
    REQUIRE(ib);
    CHECK(ib->env == "NCCL_IB_DISABLE");
    CHECK(ib->unset == "default");
    CHECK(ib->edits.size() == 1); // the export overrides the trial's value: remove it

    const auto s = read_batch_script("mpirun -np 8 ./train_gpt2cu -b 16 -z 1\n", "x");
    CHECK(s.program == "./train_gpt2cu");
}

TEST_CASE("Hydra and OmegaConf key=value overrides: a key the script adds with + is overridden with ++") {
    const auto d =
        discover("python3 main.py training.model.micro_batch_size=1 "
                 "training.model.tensor_model_parallel_size=4 training.trainer.precision=bf16-mixed "
                 "+training.model.fp8=True training.model.virtual_pipeline_model_parallel_size=12 "
                 "training.model.activations_checkpoint_granularity=selective\n",
                 {8, 8, std::nullopt});
    INFO(all_names(d));
    REQUIRE(knob(d, "micro_batch"));
    CHECK(knob(d, "micro_batch")->arg == std::vector<std::string>{"training.model.micro_batch_size={}"});
    REQUIRE(knob(d, "precision"));
    CHECK(knob(d, "precision")->values.front() == "bf16-mixed"); // NeMo's vocabulary, not Lightning's 32-true
    CHECK(std::count(knob(d, "precision")->values.begin(), knob(d, "precision")->values.end(), "32-true") ==
          0);
    REQUIRE(knob(d, "fp8"));
    CHECK(knob(d, "fp8")->arg == std::vector<std::string>{"++training.model.fp8={}"});
    CHECK(knob(d, "fp8")->values == std::vector<std::string>{"True", "False"}); // the script's own spelling
    REQUIRE(knob(d, "virtual_pipeline"));
    CHECK(knob(d, "virtual_pipeline")->values == std::vector<std::string>{"12", "null"});
    REQUIRE(knob(d, "recompute"));
}

TEST_CASE("vocabularies: the value the script writes picks the framework's, a CPU run gets no dtype knob") {
    // OLMo's activation checkpointing and its FSDP strategy, in --key=value dot-lists
    auto d =
        discover("torchrun --nproc-per-node 8 scripts/train.py c.yaml --activation_checkpointing=one_in_four "
                 "--fsdp.sharding_strategy=HYBRID_SHARD --compile.fullgraph=false "
                 "--device_train_microbatch_size=2 --precision=amp_bf16\n");
    REQUIRE(knob(d, "recompute"));
    CHECK(knob(d, "recompute")->values.size() == 8);
    CHECK(knob(d, "recompute")->values.front() == "one_in_four");
    REQUIRE(knob(d, "fsdp_sharding"));
    CHECK(knob(d, "fsdp_sharding")->values.front() == "HYBRID_SHARD");
    REQUIRE(knob(d, "compile"));
    CHECK(knob(d, "compile")->values == std::vector<std::string>{"false", "true"});
    REQUIRE(knob(d, "precision"));
    CHECK(knob(d, "precision")->values ==
          std::vector<std::string>{"amp_bf16", "amp_fp16", "fp32"}); // OLMo's, not Lightning's
    // nanoGPT's configurator takes Python literals: True/False, as the script writes them
    d = discover("torchrun train.py config/x.py --compile=False --dtype=bfloat16 --device=cuda\n");
    REQUIRE(knob(d, "compile"));
    CHECK(knob(d, "compile")->values == std::vector<std::string>{"False", "True"});
    CHECK(knob(d, "dtype"));
    d = discover("python train.py --dtype=float32 --device=cpu --batch_size=4\n");
    CHECK_FALSE(knob(d, "dtype"));
    CHECK(knob(d, "micro_batch"));
    // The HF Trainer's --fsdp list: the sharding word varied, offload dropped once
    d = discover("torchrun train.py --fsdp \"full_shard auto_wrap offload\" --gradient_checkpointing True "
                 "--bf16 True --per_device_train_batch_size 4 --gradient_accumulation_steps 4\n");
    REQUIRE(knob(d, "fsdp"));
    CHECK(knob(d, "fsdp")->values.front() == "full_shard auto_wrap offload");
    CHECK(std::count(knob(d, "fsdp")->values.begin(), knob(d, "fsdp")->values.end(),
                     "shard_grad_op auto_wrap offload") == 1);
    CHECK(std::count(knob(d, "fsdp")->values.begin(), knob(d, "fsdp")->values.end(),
                     "full_shard auto_wrap") == 1);
    REQUIRE(knob(d, "recompute"));
    CHECK(knob(d, "recompute")->values == std::vector<std::string>{"True", "False"});
    REQUIRE(knob(d, "grad_accum"));
    CHECK(knob(d, "micro_batch")->max == 16); // micro x accumulation = 16 kept
}

TEST_CASE("exports: NCCL's variables with their presets, OMP_NUM_THREADS, a launch line's own NAME=value") {
    const auto d = discover("#!/bin/bash\n#SBATCH --cpus-per-task=16\n"
                            "export NCCL_ALGO=Ring\nexport NCCL_BUFFSIZE=8388608\nexport NCCL_DEBUG=INFO\n"
                            "export NCCL_SOCKET_IFNAME=eth0\nexport OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n"
                            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun train.py\n",
                            {std::nullopt, std::nullopt, 16});
    INFO(all_names(d));
    REQUIRE(knob(d, "nccl_algo"));
    CHECK(knob(d, "nccl_algo")->values == std::vector<std::string>{"Ring", "Tree", "default"});
    REQUIRE(knob(d, "nccl_buffsize"));
    CHECK_FALSE(knob(d, "nccl_debug"));         // debugging, not tuning
    CHECK_FALSE(knob(d, "nccl_socket_ifname")); // the site's interface
    CHECK(d.presets == std::vector<std::string>{"nccl-algo", "nccl-buffers"});
    REQUIRE(knob(d, "omp_threads"));
    CHECK(knob(d, "omp_threads")->baseline_number == 16);
    REQUIRE(knob(d, "pytorch_cuda_alloc_conf"));
    CHECK(knob(d, "pytorch_cuda_alloc_conf")->edits.size() == 1);
}

TEST_CASE("the launch inside wrappers, a loop over layouts, a background server, a command string") {
    // conda run ... python: the launcher is python; the servers started with & are other launches
    auto s = read_batch_script("vllm serve m --tensor-parallel-size 4 &\n"
                               "conda run --no-capture-output -n neox python deepy.py train.py c.yml\n",
                               "x");
    CHECK(s.launch_line == 2);
    CHECK(s.program == "deepy.py");
    // for CONFIG in ...; IFS=, read TP PP <<< "$CONFIG": the first layout's values
    s = read_batch_script("CONFIGS=(\"2,4\" \"4,2\")\nfor CONFIG in \"${CONFIGS[@]}\"; do\n"
                          "  IFS=',' read -r TP PP <<< \"$CONFIG\"\n"
                          "  CMD=\"python run.py model.tensor_model_parallel_size=$TP "
                          "model.pipeline_model_parallel_size=$PP\"\n"
                          "  srun bash -c \"$CMD\"\ndone\n",
                          "x");
    CHECK(s.launch_in_loop);
    CHECK(s.launch_in_command_string);
    REQUIRE(s.program_args.size() == 2);
    CHECK(s.program_args[0].value == "2");
    CHECK(s.program_args[1].value == "4");
    // cmd="torchrun ${ARGS[@]} ..." joins the array into the value
    s = read_batch_script(
        "A=(--nproc_per_node 8 --nnodes 2)\ncmd=\"torchrun ${A[@]} train.py --compile=False\"\n"
        "srun $cmd\n",
        "x");
    CHECK(s.launcher == "torchrun");
    CHECK(s.program == "train.py");
    // IFS=$'\n\t' does not open a quote that swallows the script; : ${MASTER_PORT:=12356} is a fixed port
    s = read_batch_script("IFS=$'\\n\\t'\n: ${MASTER_PORT:=12356}\ncd /home/me/code\n"
                          "srun -o out.log torchrun train.py '--x=1'\n",
                          "x");
    CHECK(s.launcher == "torchrun");
    CHECK(s.fixed_port == "12356");
    CHECK(s.absolute_cd == "/home/me/code");
    CHECK(s.stdout_redirect == "out.log");
}

TEST_CASE("a knob's argument as two argv words: the contract reads an array, the space delivers both") {
    const std::string file = std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml";
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const auto c = load_text(
        text.str() + "\n[knobs.llmc_batch]\nkind = \"pow2\"\nmin = 4\nmax = 16\narg = [\"-b\", \"{}\"]\n"
                     "baseline = 8\n"
                     "[knobs.fused_flag]\nkind = \"bool\"\narg = [\"--fused\"]\nbaseline = false\n",
        file);
    const auto* k = c.space.knob("llmc_batch");
    REQUIRE(k);
    CHECK(k->arg == std::vector<std::string>{"-b", "{}"});
    auto cand = c.space.baseline();
    cand.knobs["fused_flag"] = true;
    const auto args = c.space.arguments(cand);
    const auto b = std::find(args.begin(), args.end(), "-b");
    REQUIRE(b != args.end());
    REQUIRE(b + 1 != args.end());
    CHECK(*(b + 1) == "8");
    CHECK(std::find(args.begin(), args.end(), "--fused") != args.end());
    // An empty element is refused with the knob's name
    CHECK_THROWS_WITH_AS(load_text(text.str() + "\n[knobs.bad]\nkind = \"pow2\"\nmin = 4\nmax = 16\n"
                                                "arg = [\"-b\", \"\"]\nbaseline = 8\n",
                                   file),
                         doctest::Contains("knob 'bad' has an empty argument template"), Error);
}

TEST_CASE("the loader names an error of every section at once, and skips what a failed section feeds") {
    const std::string file = std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml";
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    std::string t = text.str();
    // a mistake in two sections: an unknown key in [budget], another in [repeats]
    const auto at = [&](const std::string& key) {
        const auto p = t.find(key);
        REQUIRE(p != std::string::npos);
        return p;
    };
    t.insert(at("trials = "), "not_a_key = 1\n");
    t.insert(at("[repeats]\n") + 10, "whatever = 1\n");
    try {
        (void)load_text(t, file);
        FAIL("the contract loaded");
    } catch (const Error& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2 errors:") != std::string::npos);
        CHECK(what.find("not_a_key") != std::string::npos);
        CHECK(what.find("whatever") != std::string::npos);
    }
}

TEST_CASE(
    "here-documents: their lines are input, not commands, and read into a variable they are its value") {
    // The JSON a Megatron-DeepSpeed script writes with cat <<EOT is no command (its "python" line neither)
    auto s = read_batch_script("cat <<EOT > ds_config.json\n{\"stage\": 1}\npython evil.py --x 1\nEOT\n"
                               "torchrun train.py --zero-stage 1\n",
                               "x");
    CHECK(s.launch_line == 5);
    CHECK(s.other_launch_lines.empty());
    // <<-'EOF' strips leading tabs and ends at a tab-indented delimiter
    s = read_batch_script("cat <<-'EOF'\n\tpython no.py\n\tEOF\npython yes.py\n", "x");
    CHECK(s.program == "yes.py");
    CHECK(s.other_launch_lines.empty());
    // NeMo's read -r -d '' cmd <<EOF ... EOF, run by srun bash -c "${cmd}": the launch inside it, its cd too
    s = read_batch_script("CODE=/opt/nemo\nread -r -d '' cmd <<EOF\ncd ${CODE} \\\n"
                          "&& python -u ${CODE}/train.py trainer.devices=8 model.micro_batch_size=4\nEOF\n"
                          "srun -o out.log bash -c \"${cmd}\"\n",
                          "x");
    CHECK(s.launch_in_command_string);
    CHECK(s.program == "/opt/nemo/train.py");
    CHECK(s.absolute_cd == "/opt/nemo");
    CHECK(s.stdout_redirect == "out.log");
    const auto d = discover_knobs(s, {});
    CHECK(std::any_of(d.knobs.begin(), d.knobs.end(),
                      [](const SuggestedKnob& k) { return k.name == "micro_batch"; }));
}

TEST_CASE("a job's config and command from here-documents (tests/fixtures/scripts/heredoc.sbatch)") {
    std::ifstream in(std::string(INFRARSI_FIXTURES) + "/scripts/heredoc.sbatch");
    std::stringstream text;
    text << in.rdbuf();
    const auto s = read_batch_script(text.str(), "heredoc.sbatch");
    CHECK(s.program == "train.py");
    CHECK(s.other_launch_lines.empty()); // the `cd` behind the srun that runs the string is no launch
    CHECK(s.absolute_cd == "/opt/code");
    const auto d = discover_knobs(s, {});
    CHECK(d.knobs.size() == 2); // --zero_stage and --per_device_train_batch_size
}
