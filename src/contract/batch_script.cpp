#include "contract/batch_script.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace infrarsi::contract {
namespace {

bool is_name_char(char c, bool first) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// NAME= at the start of a word: the name, else empty.
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

std::string assignment_name(const std::string& w) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0) return {};
    for (std::size_t i = 0; i < eq; ++i)
        if (!is_name_char(w[i], i == 0)) return {};
    return w.substr(0, eq);
}

struct Command {
    std::vector<std::string> words;
    int line = 0;
};

// A small shell lexer: words, quotes, backslashes, line continuations, comments, and the expansion of the
// variables the script itself assigned a value. Commands end at a newline, ';', '&&', '||' or '|'.
class Lexer {
  public:
    explicit Lexer(std::string_view text) : s_(text) {}

    std::vector<Command> commands() {
        std::vector<Command> out;
        while (i_ < s_.size()) {
            Command c = command();
            if (!c.words.empty()) out.push_back(std::move(c));
        }
        return out;
    }

  private:
    std::string_view s_;
    std::size_t i_ = 0;
    int line_ = 1;
    std::map<std::string, std::vector<std::string>> vars_; // arrays and scalars (one element)
    std::vector<std::string> words_;
    std::string word_;
    bool in_word_ = false;

    char peek(std::size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
    void take_char(char c) {
        if (c == '\n') ++line_;
        ++i_;
    }
    void end_word() {
        if (in_word_) words_.push_back(word_);
        word_.clear();
        in_word_ = false;
    }
    void append(std::string_view t) {
        word_ += t;
        in_word_ = true;
    }

    // A parameter expansion starting at '$' (i_ on the '$'): returns the raw text and the name (empty when
    // it is no plain variable: $(...), $@, ${X:-y}, ...) and whether it asks for every array element.
    struct Param {
        std::string raw, name;
        bool all = false;
    };
    Param parameter() {
        Param p;
        const std::size_t start = i_;
        take_char('$');
        if (peek() == '(') { // $(...) or $((...)): kept as written, nesting counted
            int depth = 0;
            do {
                if (peek() == '(') ++depth;
                if (peek() == ')') --depth;
                take_char(peek());
            } while (i_ < s_.size() && depth > 0);
        } else if (peek() == '{') {
            take_char('{');
            std::size_t name_start = i_;
            while (is_name_char(peek(), i_ == name_start))
                take_char(peek());
            std::string name(s_.substr(name_start, i_ - name_start));
            std::string rest;
            while (i_ < s_.size() && peek() != '}') {
                rest += peek();
                take_char(peek());
            }
            if (peek() == '}') take_char('}');
            if (rest.empty() || rest == "[@]" || rest == "[*]") {
                p.name = name;
                p.all = !rest.empty();
            }
        } else if (is_name_char(peek(), true)) {
            std::size_t name_start = i_;
            while (is_name_char(peek(), i_ == name_start))
                take_char(peek());
            p.name = std::string(s_.substr(name_start, i_ - name_start));
        } else if (i_ < s_.size() && !std::isspace(static_cast<unsigned char>(peek())) && peek() != '"') {
            take_char(peek()); // $@, $1, $#, ...
        }
        p.raw = std::string(s_.substr(start, i_ - start));
        return p;
    }

    void expand_unquoted(const Param& p) {
        auto it = p.name.empty() ? vars_.end() : vars_.find(p.name);
        if (it == vars_.end()) {
            append(p.raw);
            return;
        }
        const auto& values = it->second;
        const std::size_t n = p.all ? values.size() : std::min<std::size_t>(1, values.size());
        for (std::size_t k = 0; k < n; ++k) {
            if (k) end_word();
            for (char c : values[k]) { // word splitting on blanks, as bash does for an unquoted expansion
                if (c == ' ' || c == '\t' || c == '\n')
                    end_word();
                else
                    append(std::string_view(&c, 1));
            }
        }
    }

    void double_quoted() {
        take_char('"');
        in_word_ = true;
        while (i_ < s_.size() && peek() != '"') {
            const char c = peek();
            if (c == '\\' && std::string_view("\"\\$`\n").find(peek(1)) != std::string_view::npos) {
                take_char(c);
                if (peek() != '\n') append(std::string_view(&s_[i_], 1));
                take_char(peek());
            } else if (c == '$') {
                Param p = parameter();
                auto it = p.name.empty() ? vars_.end() : vars_.find(p.name);
                if (it == vars_.end()) {
                    append(p.raw);
                } else if (p.all) { // "${A[@]}": one word per element
                    for (std::size_t k = 0; k < it->second.size(); ++k) {
                        if (k) end_word();
                        append(it->second[k]);
                        in_word_ = true;
                    }
                } else if (!it->second.empty()) {
                    append(it->second.front());
                }
            } else {
                append(std::string_view(&s_[i_], 1));
                take_char(c);
            }
        }
        if (peek() == '"') take_char('"');
    }

    // NAME=( words ): an array assignment; i_ is on the '('.
    void array_assignment(const std::string& name) {
        take_char('(');
        std::vector<std::string> saved = std::move(words_);
        words_.clear();
        word_.clear();
        in_word_ = false;
        while (i_ < s_.size() && peek() != ')') {
            if (!step(/*in_array=*/true)) break;
        }
        end_word();
        if (peek() == ')') take_char(')');
        vars_[name] = words_;
        words_ = std::move(saved);
        word_.clear();
        in_word_ = false;
    }

    // One lexical step; returns false at the end of a command.
    bool step(bool in_array) {
        const char c = peek();
        if (c == '\\' && peek(1) == '\n') { // line continuation
            take_char(c);
            take_char('\n');
            return true;
        }
        if (c == '\n') {
            if (in_array) {
                end_word();
                take_char(c);
                return true;
            }
            take_char(c);
            return false;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            end_word();
            take_char(c);
            return true;
        }
        if (c == '#' && !in_word_) {
            while (i_ < s_.size() && peek() != '\n')
                take_char(peek());
            return true;
        }
        if (!in_array && (c == ';' || c == '|' || (c == '&' && peek(1) == '&'))) {
            take_char(c);
            if (peek() == c) take_char(c);
            return false;
        }
        if (c == '\\') {
            take_char(c);
            if (i_ < s_.size()) {
                append(std::string_view(&s_[i_], 1));
                take_char(peek());
            }
            return true;
        }
        if (c == '\'') {
            take_char(c);
            in_word_ = true;
            while (i_ < s_.size() && peek() != '\'') {
                append(std::string_view(&s_[i_], 1));
                take_char(peek());
            }
            if (peek() == '\'') take_char('\'');
            return true;
        }
        if (c == '"') {
            double_quoted();
            return true;
        }
        if (c == '$') {
            expand_unquoted(parameter());
            return true;
        }
        if (c == '(' && !in_array && words_.empty() && in_word_ && !word_.empty() && word_.back() == '=') {
            const std::string name = assignment_name(word_);
            if (!name.empty()) {
                array_assignment(name);
                word_ = name + "=";
                in_word_ = true;
                end_word();
                return true;
            }
        }
        append(std::string_view(&s_[i_], 1));
        take_char(c);
        return true;
    }

    Command command() {
        words_.clear();
        word_.clear();
        in_word_ = false;
        int first_line = 0;
        while (i_ < s_.size()) {
            if (first_line == 0 && !std::isspace(static_cast<unsigned char>(peek()))) first_line = line_;
            if (!step(false)) break;
        }
        end_word();
        Command c{std::move(words_), first_line};
        words_.clear();
        remember_assignments(c);
        return c;
    }

    // NAME=value (alone, or after export/declare/readonly) sets a variable later commands may expand.
    void remember_assignments(const Command& c) {
        std::size_t k = 0;
        if (!c.words.empty() && (c.words[0] == "export" || c.words[0] == "declare" ||
                                 c.words[0] == "readonly" || c.words[0] == "local"))
            k = 1;
        bool only_assignments = true;
        for (std::size_t j = k; j < c.words.size(); ++j)
            if (assignment_name(c.words[j]).empty() && c.words[j].rfind('-', 0) != 0)
                only_assignments = false;
        if (!only_assignments) return;
        for (std::size_t j = k; j < c.words.size(); ++j) {
            const std::string name = assignment_name(c.words[j]);
            if (name.empty()) continue;
            const std::string value = c.words[j].substr(name.size() + 1);
            if (value.empty() && vars_.count(name)) continue; // an array assigned just before
            // A command's output ($(hostname), `...`) is not known before the job runs: keep $NAME as
            // written.
            if (value.find("$(") != std::string::npos || value.find('`') != std::string::npos) {
                vars_.erase(name);
                continue;
            }
            vars_[name] = {value};
        }
    }
};

std::string basename(const std::string& w) {
    const auto slash = w.rfind('/');
    return slash == std::string::npos ? w : w.substr(slash + 1);
}

bool is_python(const std::string& w) {
    const std::string b = basename(w);
    if (b.rfind("python", 0) != 0) return false;
    return std::all_of(b.begin() + 6, b.end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

// Long options of sbatch's short ones that #SBATCH lines use.
std::string long_sbatch_name(const std::string& opt) {
    static const std::map<std::string, std::string> shorts{
        {"N", "nodes"},     {"n", "ntasks"},   {"c", "cpus-per-task"}, {"t", "time"},
        {"p", "partition"}, {"J", "job-name"}, {"G", "gpus"},          {"o", "output"},
        {"e", "error"},     {"A", "account"},  {"q", "qos"},           {"C", "constraint"},
        {"w", "nodelist"},  {"x", "exclude"},  {"a", "array"},         {"D", "chdir"}};
    auto it = shorts.find(opt);
    return it == shorts.end() ? opt : it->second;
}

// The words of one "#SBATCH ..." line as option -> value pairs.
void read_sbatch_line(const std::string& rest, int line, BatchScript& out) {
    std::vector<std::string> words;
    std::string w;
    for (char c : rest) {
        if (c == '#' && w.empty()) break; // a trailing comment
        if (c == ' ' || c == '\t' || c == '\r') {
            if (!w.empty()) words.push_back(w);
            w.clear();
        } else if (c != '"' && c != '\'') {
            w += c;
        }
    }
    if (!w.empty()) words.push_back(w);
    for (std::size_t k = 0; k < words.size(); ++k) {
        const std::string& a = words[k];
        std::string name, value;
        if (a.rfind("--", 0) == 0) {
            const auto eq = a.find('=');
            name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
            if (eq != std::string::npos)
                value = a.substr(eq + 1);
            else if (k + 1 < words.size() && words[k + 1].rfind('-', 0) != 0)
                value = words[++k];
        } else if (a.size() >= 2 && a[0] == '-') {
            name = long_sbatch_name(a.substr(1, 1));
            if (a.size() > 2)
                value = a.substr(a[2] == '=' ? 3 : 2);
            else if (k + 1 < words.size() && words[k + 1].rfind('-', 0) != 0)
                value = words[++k];
        } else {
            continue;
        }
        out.sbatch[name] = value;
        out.sbatch_line[name] = line;
    }
}

// The options of a launcher that take no value (so the next word is not theirs).
const std::set<std::string>& flag_options(const std::string& launcher) {
    static const std::map<std::string, std::set<std::string>> flags{
        {"torchrun",
         {"--standalone", "--no_python", "--no-python", "--run_path", "--run-path", "-m", "--module", "--tee",
          "--redirects"}},
        {"srun",
         {"--exclusive", "--overlap", "--label", "-l", "--unbuffered", "-u", "--mpi=pmix",
          "--kill-on-bad-exit", "-K", "--cpu-bind=none", "--export=ALL", "--overcommit", "-O"}},
        {"deepspeed", {"--no_python", "--no_local_rank", "--force_multi", "--autotuning"}},
        {"accelerate", {"--multi_gpu", "--use_deepspeed", "--use_fsdp", "--cpu", "--mixed_precision"}},
        {"python", {"-u", "-O", "-OO", "-B", "-s", "-S", "-E", "-I", "-b", "-q"}}};
    static const std::set<std::string> none;
    auto it = flags.find(launcher);
    return it == flags.end() ? none : it->second;
}

// Consumes a launcher's options from words[k...]: stops at the first word that is not an option (the
// program). Options written `--x y` take the next word unless they are known flags.
std::size_t take_options(const std::vector<std::string>& words, std::size_t k, const std::string& launcher,
                         std::vector<std::string>& out) {
    const auto& flags = flag_options(launcher);
    while (k < words.size() && words[k].size() > 1 && words[k][0] == '-') {
        const std::string& w = words[k];
        out.push_back(w);
        ++k;
        if (w == "-m" && launcher == "python") break; // the module is the program
        const bool has_value = w.find('=') != std::string::npos || flags.count(w) ||
                               (w.size() > 2 && w[1] != '-' && launcher != "python"); // -n4
        if (!has_value && k < words.size() && words[k].rfind('-', 0) != 0) out.push_back(words[k++]);
    }
    return k;
}

std::vector<ProgramArg> read_program_args(const std::vector<std::string>& words) {
    std::vector<ProgramArg> out;
    for (std::size_t k = 0; k < words.size(); ++k) {
        const std::string& w = words[k];
        if (w.rfind("--", 0) != 0 || w.size() < 3) continue;
        ProgramArg a;
        const auto eq = w.find('=');
        if (eq != std::string::npos) {
            a.name = w.substr(0, eq);
            a.value = w.substr(eq + 1);
        } else {
            a.name = w;
            if (k + 1 < words.size() && words[k + 1].rfind("--", 0) != 0)
                a.value = words[++k];
            else
                a.flag = true;
        }
        out.push_back(std::move(a));
    }
    return out;
}

// Fills the launch fields from one command, if its program is a known launcher.
bool read_launch(const Command& c, BatchScript& out) {
    const auto& w = c.words;
    std::size_t k = 0;
    while (k < w.size() &&
           (!assignment_name(w[k]).empty() || w[k] == "exec" || w[k] == "time" || w[k] == "nohup" ||
            w[k] == "env" || w[k] == "do" || w[k] == "then" || w[k] == "else"))
        ++k;
    if (k >= w.size()) return false;
    std::vector<std::string> srun;
    const std::string first = basename(w[k]);
    if (first == "srun" || first == "mpirun" || first == "mpiexec") {
        srun.push_back(w[k]);
        k = take_options(w, k + 1, "srun", srun);
        if (k >= w.size()) return false;
    }
    std::string launcher = basename(w[k]);
    std::vector<std::string> largs;
    if (launcher == "torchrun" || launcher == "deepspeed") {
        k = take_options(w, k + 1, launcher, largs);
    } else if (launcher == "accelerate" && k + 1 < w.size() && w[k + 1] == "launch") {
        k = take_options(w, k + 2, launcher, largs);
    } else if (is_python(w[k])) {
        launcher = "python";
        k = take_options(w, k + 1, "python", largs);
        // python -m torch.distributed.run / .launch is torchrun
        if (!largs.empty() && largs.back() == "-m" && k < w.size() &&
            (w[k] == "torch.distributed.run" || w[k] == "torch.distributed.launch")) {
            launcher = "torchrun";
            largs.clear();
            k = take_options(w, k + 1, launcher, largs);
        }
    } else if (!srun.empty()) {
        launcher = "srun"; // srun ./train or srun some-binary: the program is the word after srun's options
    } else {
        return false;
    }
    if (k >= w.size()) return false;
    out.launch_line = c.line;
    out.srun = std::move(srun);
    out.launcher = launcher;
    out.launcher_args = std::move(largs);
    out.program = w[k];
    // Redirections are the shell's, not the program's: `> log.txt`, `>>log`, `&> log`, `2>&1`, `1> f`.
    out.program_words.clear();
    out.stdout_redirect.clear();
    for (std::size_t j = k + 1; j < w.size(); ++j) {
        const std::string& word = w[j];
        const auto gt = word.find('>');
        const std::string fd = gt == std::string::npos ? "" : word.substr(0, gt);
        if (gt == std::string::npos ||
            !(fd.empty() || fd == "&" || std::all_of(fd.begin(), fd.end(), is_digit))) {
            out.program_words.push_back(word);
            continue;
        }
        std::string target = word.substr(gt + 1);
        if (!target.empty() && target[0] == '>') target.erase(0, 1); // >>
        if (target.empty() && j + 1 < w.size()) target = w[++j];
        const bool stdout_too = fd.empty() || fd == "&" || fd == "1";
        if (stdout_too && target.rfind('&', 0) != 0 && target != "/dev/stdout") out.stdout_redirect = target;
    }
    out.program_args = read_program_args(out.program_words);
    for (const auto& word : out.program_words)
        if (word == "$@" || word == "${@}" || word == "$*") out.forwards_arguments = true;
    return true;
}

} // namespace

std::optional<std::string> BatchScript::launcher_option(std::string_view name) const {
    auto norm = [](std::string s) {
        std::replace(s.begin(), s.end(), '-', '_');
        return s;
    };
    const std::string want = norm(std::string(name));
    for (std::size_t k = 0; k < launcher_args.size(); ++k) {
        const std::string& a = launcher_args[k];
        const auto eq = a.find('=');
        if (norm(a.substr(0, eq)) != want) continue;
        if (eq != std::string::npos) return a.substr(eq + 1);
        if (k + 1 < launcher_args.size()) return launcher_args[k + 1];
    }
    return std::nullopt;
}

BatchScript read_batch_script(std::string_view text, const std::string& where) {
    if (text.find('\0') != std::string_view::npos)
        throw Error("the script holds NUL bytes", where, "a shell script (text)");
    BatchScript out;
    // #SBATCH lines: sbatch reads them up to the first line that is neither blank nor a comment.
    std::size_t pos = 0;
    int line = 0;
    while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        std::string l(text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        ++line;
        std::size_t first = l.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        if (l[first] != '#') break;
        if (l.compare(0, 7, "#SBATCH") == 0) read_sbatch_line(l.substr(7), line, out);
    }
    // The launch: of the commands that launch a known program, the first a distributed launcher runs
    // (torchrun, deepspeed, accelerate), else the first through srun or mpirun, else the first (a data
    // preparation's `python prep.py` before the training's `srun torchrun ...` is not the training).
    struct Launch {
        BatchScript read;
        int rank = 0;
        bool in_loop = false;
    };
    std::vector<Launch> launches;
    int loops = 0;
    auto positional = [](const std::string& word) {
        for (std::size_t k = 0; k + 1 < word.size(); ++k)
            if (word[k] == '$' &&
                ((word[k + 1] >= '1' && word[k + 1] <= '9') ||
                 (word[k + 1] == '{' && k + 2 < word.size() && word[k + 2] >= '1' && word[k + 2] <= '9')))
                return true;
        return false;
    };
    auto literal_port = [](const std::string& v) {
        return !v.empty() && v.size() <= 5 && std::all_of(v.begin(), v.end(), is_digit);
    };
    for (const auto& c : Lexer(text).commands()) {
        const std::string& first = c.words.front();
        if (first == "for" || first == "while" || first == "until" || first == "select") ++loops;
        if (first == "done" && loops > 0) --loops;
        if (std::any_of(c.words.begin(), c.words.end(), positional)) out.positional_lines.push_back(c.line);
        for (const auto& word : c.words)
            if (assignment_name(word) == "MASTER_PORT" && literal_port(word.substr(12)) &&
                out.fixed_port.empty()) {
                out.fixed_port = word.substr(12);
                out.fixed_port_line = c.line;
            }
        BatchScript l;
        if (!read_launch(c, l)) continue;
        const bool distributed =
            l.launcher == "torchrun" || l.launcher == "deepspeed" || l.launcher == "accelerate";
        const int rank = distributed ? 2 : !l.srun.empty() ? 1 : 0;
        launches.push_back({std::move(l), rank, loops > 0});
    }
    const Launch* taken = nullptr;
    for (const auto& l : launches)
        if (!taken || l.rank > taken->rank) taken = &l;
    if (!taken) return out;
    for (const auto& l : launches)
        if (&l != taken) out.other_launch_lines.push_back(l.read.launch_line);
    auto& t = taken->read;
    out.launch_line = t.launch_line;
    out.srun = t.srun;
    out.launcher = t.launcher;
    out.launcher_args = t.launcher_args;
    out.program = t.program;
    out.program_words = t.program_words;
    out.program_args = t.program_args;
    out.forwards_arguments = t.forwards_arguments;
    out.stdout_redirect = t.stdout_redirect;
    out.launch_in_loop = taken->in_loop;
    if (out.fixed_port.empty())
        for (const char* opt : {"--master_port", "--main_process_port", "--rdzv_endpoint"})
            if (const auto v = out.launcher_option(opt)) {
                const auto colon = v->rfind(':');
                const std::string port = colon == std::string::npos ? *v : v->substr(colon + 1);
                if (literal_port(port)) {
                    out.fixed_port = port;
                    out.fixed_port_line = out.launch_line;
                    break;
                }
            }
    return out;
}

} // namespace infrarsi::contract
