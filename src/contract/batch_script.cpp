#include "contract/batch_script.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
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

using Vars = std::map<std::string, std::vector<std::string>>; // arrays and scalars (one element)

// Where a word's text came from: the one variable expansion in it, if there was exactly one ([begin, end)
// of the word); `defaulted`: the variable was unset and ${NAME:-default} gave the default.
struct Provenance {
    std::string var;
    std::size_t begin = 0, end = 0;
    int expansions = 0;
    bool defaulted = false;
    // The whole of `text` from [from, end of word) came from one variable: its name, else empty.
    std::string whole_value(const std::string& text, std::size_t from) const {
        return expansions == 1 && begin == from && end == text.size() ? var : std::string();
    }
};

struct Command {
    std::vector<std::string> words;
    std::vector<Provenance> provenance; // one per word
    int line = 0;
};

// A small shell lexer: words, quotes, backslashes, line continuations, comments, and the expansion of the
// variables the script itself assigned a value. Commands end at a newline, ';', '&&', '||' or '|'.
class Lexer {
  public:
    explicit Lexer(std::string_view text, Vars vars = {}, std::map<std::string, ScriptVariable> assigned = {})
        : s_(text), vars_(std::move(vars)), assigned_(std::move(assigned)) {}

    // The next command, read as far as it goes: vars() and assigned() are then what the script has assigned
    // up to it (the command's own assignments included). Empty at the end.
    std::optional<Command> next() {
        while (i_ < s_.size()) {
            Command c = command();
            if (!c.words.empty()) return c;
        }
        return std::nullopt;
    }
    const Vars& vars() const { return vars_; }
    const std::map<std::string, ScriptVariable>& assigned() const { return assigned_; }

  private:
    std::string_view s_;
    std::size_t i_ = 0;
    int line_ = 1;
    Vars vars_;
    std::map<std::string, std::vector<Provenance>> element_provenance_; // an array's elements: where from
    std::map<std::string, ScriptVariable> assigned_;
    std::vector<std::string> words_;
    std::vector<Provenance> provenance_;
    std::string word_;
    Provenance current_;
    bool in_word_ = false;

    char peek(std::size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
    void take_char(char c) {
        if (c == '\n') ++line_;
        ++i_;
    }
    void end_word() {
        if (in_word_) {
            words_.push_back(word_);
            provenance_.push_back(current_);
        }
        word_.clear();
        current_ = {};
        in_word_ = false;
    }
    void append(std::string_view t) {
        word_ += t;
        in_word_ = true;
    }
    // The variable an array's element came from whole ("--tp $TP" in PAR=(...)), if any, and whether its
    // default gave it.
    std::string element_variable(const std::string& array, std::size_t k) const {
        const auto it = element_provenance_.find(array);
        if (it == element_provenance_.end() || k >= it->second.size() || k >= vars_.at(array).size())
            return {};
        const std::string& v = vars_.at(array)[k];
        if (v.find_first_of(" \t\n") != std::string::npos) return {};
        return it->second[k].whole_value(v, 0);
    }
    bool element_defaulted(const std::string& array, std::size_t k) const {
        return element_provenance_.at(array)[k].defaulted;
    }
    // A variable's value, as one piece of the word.
    void append_var(const std::string& name, std::string_view t, bool defaulted) {
        current_.var = name;
        current_.begin = word_.size();
        current_.defaulted = defaulted;
        ++current_.expansions;
        append(t);
        current_.end = word_.size();
    }

    // A parameter expansion starting at '$' (i_ on the '$'): returns the raw text and the name (empty when
    // it is no plain variable: $(...), $@, ${X:-y}, ...) and whether it asks for every array element.
    struct Param {
        std::string raw, name;
        bool all = false;
        std::optional<std::string> fallback; // ${NAME:-value}, ${NAME-value}, ${NAME:=value}: the value
    };
    Param parameter() {
        Param p;
        const std::size_t start = i_;
        take_char('$');
        if (peek() == '\'') { // $'...': ANSI-C quoting, kept as written (IFS=$'\n\t')
            take_char('\'');
            while (i_ < s_.size() && peek() != '\'') {
                if (peek() == '\\' && i_ + 1 < s_.size()) take_char(peek());
                take_char(peek());
            }
            if (peek() == '\'') take_char('\'');
        } else if (peek() == '(') { // $(...) or $((...)): kept as written, nesting counted
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
            } else if (!name.empty() && name.rfind("SLURM_", 0) != 0) {
                // (${SLURM_NTASKS_PER_NODE:-1} stays as written: the allocation sets it, the draft reads it)
                for (const char* op : {":-", ":=", "-", "="})
                    if (rest.rfind(op, 0) == 0) {
                        p.name = name;
                        p.fallback = rest.substr(std::strlen(op));
                        break;
                    }
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

    // The text a ${NAME:-value} gives when NAME is unset: its value, a variable's value when it is one
    // ($OTHER), else nothing known.
    std::optional<std::string> fallback_text(const Param& p) const {
        if (!p.fallback) return std::nullopt;
        const std::string& f = *p.fallback;
        if (f.find('$') == std::string::npos && f.find('`') == std::string::npos) return f;
        std::string name = f.substr(f.rfind("${", 0) == 0 ? 2 : 1);
        if (!name.empty() && name.back() == '}') name.pop_back();
        if (auto it = vars_.find(name); it != vars_.end() && it->second.size() == 1)
            return it->second.front();
        return std::nullopt;
    }

    void expand_unquoted(const Param& p) {
        auto it = p.name.empty() ? vars_.end() : vars_.find(p.name);
        if (it == vars_.end()) {
            if (auto f = fallback_text(p); f && f->find_first_of(" \t\n") == std::string::npos)
                append_var(p.name, *f, true);
            else
                append(p.raw);
            return;
        }
        const auto& values = it->second;
        if (!p.all && values.size() == 1 && values[0].find_first_of(" \t\n") == std::string::npos) {
            append_var(p.name, values[0], false); // one word, all of it the variable's
            return;
        }
        const std::size_t n = p.all ? values.size() : std::min<std::size_t>(1, values.size());
        for (std::size_t k = 0; k < n; ++k) {
            if (k) end_word();
            if (const std::string from = element_variable(p.name, k); !from.empty()) {
                append_var(from, values[k], element_defaulted(p.name, k)); // (--tp $TP) in an array
                continue;
            }
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
                    if (auto f = fallback_text(p))
                        append_var(p.name, *f, true);
                    else
                        append(p.raw);
                } else if (p.all && words_.empty() && !assignment_name(word_).empty()) {
                    // NAME="... ${A[@]} ...": the elements joined by blanks into the value
                    for (std::size_t k = 0; k < it->second.size(); ++k)
                        append((k ? " " : "") + it->second[k]);
                } else if (p.all) { // "${A[@]}": one word per element
                    for (std::size_t k = 0; k < it->second.size(); ++k) {
                        if (k) end_word();
                        if (const std::string from = element_variable(p.name, k); !from.empty())
                            append_var(from, it->second[k], element_defaulted(p.name, k));
                        else
                            append(it->second[k]);
                        in_word_ = true;
                    }
                } else if (!it->second.empty()) {
                    append_var(p.name, it->second.front(), false);
                }
            } else {
                append(std::string_view(&s_[i_], 1));
                take_char(c);
            }
        }
        if (peek() == '"') take_char('"');
    }

    // NAME=( words ): an array assignment (appending: NAME+=( words )); i_ is on the '('.
    void array_assignment(const std::string& name, bool appending) {
        take_char('(');
        std::vector<std::string> saved = std::move(words_);
        std::vector<Provenance> saved_provenance = std::move(provenance_);
        words_.clear();
        provenance_.clear();
        word_.clear();
        current_ = {};
        in_word_ = false;
        while (i_ < s_.size() && peek() != ')') {
            if (!step(/*in_array=*/true)) break;
        }
        end_word();
        if (peek() == ')') take_char(')');
        if (appending && vars_.count(name)) {
            auto& from = element_provenance_[name];
            from.resize(vars_[name].size());
            from.insert(from.end(), provenance_.begin(), provenance_.end());
            vars_[name].insert(vars_[name].end(), words_.begin(), words_.end());
        } else {
            vars_[name] = words_;
            element_provenance_[name] = provenance_;
        }
        words_ = std::move(saved);
        provenance_ = std::move(saved_provenance);
        word_.clear();
        current_ = {};
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
        // `cmd &`: a command in the background ends there (not `&>` or `2>&1`, redirections)
        if (!in_array && c == '&' && peek(1) != '>' && !(in_word_ && !word_.empty() && word_.back() == '>')) {
            take_char(c);
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
            // NAME=( ... ), or NAME+=( ... ) appending to it
            const bool appending = word_.size() >= 2 && word_[word_.size() - 2] == '+';
            const std::string name =
                appending ? assignment_name(word_.substr(0, word_.size() - 2) + "=") : assignment_name(word_);
            if (!name.empty()) {
                array_assignment(name, appending);
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
        provenance_.clear();
        word_.clear();
        current_ = {};
        in_word_ = false;
        int first_line = 0;
        while (i_ < s_.size()) {
            if (first_line == 0 && !std::isspace(static_cast<unsigned char>(peek()))) first_line = line_;
            if (!step(false)) break;
        }
        end_word();
        Command c{std::move(words_), std::move(provenance_), first_line};
        words_.clear();
        provenance_.clear();
        remember_assignments(c);
        here_document(c);
        return c;
    }

    // `cmd <<WORD` (or <<-WORD, << 'WORD'): the lines up to WORD are the command's input, not commands. Read
    // into a variable (`read -r -d '' NAME <<EOF`), they are its value, as bash gives it.
    void here_document(const Command& c) {
        std::string delimiter;
        bool strip_tabs = false;
        for (std::size_t j = 0; j < c.words.size() && delimiter.empty(); ++j) {
            const std::string& w = c.words[j];
            if (w.rfind("<<", 0) != 0 || w.rfind("<<<", 0) == 0) continue;
            std::string rest = w.substr(2);
            strip_tabs = !rest.empty() && rest[0] == '-';
            if (strip_tabs) rest.erase(0, 1);
            if (rest.empty() && j + 1 < c.words.size()) rest = c.words[j + 1];
            delimiter = rest;
        }
        if (delimiter.empty()) return;
        while (i_ > 0 && i_ < s_.size() && s_[i_ - 1] != '\n') // the rest of the command's line first
            take_char(peek());
        std::string body;
        while (i_ < s_.size()) {
            const std::size_t end = std::min(s_.find('\n', i_), s_.size());
            std::string_view l = s_.substr(i_, end - i_);
            while (!l.empty() && l.back() == '\r')
                l.remove_suffix(1);
            if (strip_tabs)
                while (!l.empty() && l.front() == '\t')
                    l.remove_prefix(1);
            const bool last = l == delimiter;
            if (!last) body.append(l).append("\n");
            while (i_ < s_.size() && i_ <= end)
                take_char(peek());
            if (last) break;
        }
        // read [-r] [-d DELIM] NAME <<WORD: the body into NAME
        const auto& w = c.words;
        if (w.empty() || w[0] != "read") return;
        std::string name;
        for (std::size_t j = 1; j < w.size(); ++j) {
            if (w[j] == "-d" || w[j] == "-p" || w[j] == "-t" || w[j] == "-n" || w[j] == "-u") {
                ++j;
                continue;
            }
            if (w[j].empty() || w[j][0] == '-' || w[j].rfind("<<", 0) == 0 || w[j] == delimiter) continue;
            if (assignment_name(w[j] + "=") != w[j]) return;
            name = w[j];
            break;
        }
        if (name.empty()) return;
        vars_[name] = {body};
        element_provenance_.erase(name);
        assigned_[name] = {body, c.line, false, false};
    }

    // `for NAME in a b c`: a reader follows the first pass; `[IFS=,] read [-r] A B C <<< "$X"`: the words of
    // X, split at IFS, into A, B and C (the last takes the rest).
    void remember_loop_and_read(const Command& c) {
        const auto& w = c.words;
        if (!w.empty() && w[0] == ":") { // : ${NAME:=value}
            for (std::size_t j = 1; j < w.size() && j < c.provenance.size(); ++j)
                if (const std::string name = c.provenance[j].whole_value(w[j], 0);
                    !name.empty() && c.provenance[j].defaulted) {
                    vars_[name] = {w[j]};
                    assigned_[name] = {w[j], c.line, false, true};
                }
            return;
        }
        if (w.size() > 3 && w[0] == "for" && w[2] == "in" && w[3] != "do") {
            vars_[w[1]] = {w[3]};
            assigned_[w[1]] = {w[3], c.line, false, false};
            return;
        }
        std::size_t k = 0;
        std::string ifs = " \t\n";
        for (; k < w.size() && !assignment_name(w[k]).empty(); ++k)
            if (assignment_name(w[k]) == "IFS") ifs = w[k].substr(4);
        if (k >= w.size() || w[k] != "read") return;
        std::vector<std::string> names;
        for (++k; k < w.size() && w[k] != "<<<"; ++k)
            if (w[k].rfind('-', 0) != 0) names.push_back(w[k]);
        if (k + 1 >= w.size() || names.empty() || ifs.empty()) return;
        const std::string& input = w[k + 1];
        std::size_t from = 0;
        for (std::size_t n = 0; n < names.size(); ++n) {
            if (assignment_name(names[n] + "=") != names[n]) return;
            std::size_t to = n + 1 == names.size() ? input.size() : input.find_first_of(ifs, from);
            if (to == std::string::npos) to = input.size();
            const std::string value = from <= input.size() ? input.substr(from, to - from) : std::string();
            vars_[names[n]] = {value};
            assigned_[names[n]] = {value, c.line, false, false};
            from = to + 1;
        }
    }

    // NAME=value (alone, or after export/declare/readonly) sets a variable later commands may expand.
    void remember_assignments(const Command& c) {
        remember_loop_and_read(c);
        std::size_t k = 0;
        if (!c.words.empty() && (c.words[0] == "export" || c.words[0] == "declare" ||
                                 c.words[0] == "readonly" || c.words[0] == "local"))
            k = 1;
        const bool exporting = k == 1 && c.words[0] == "export";
        bool only_assignments = true;
        for (std::size_t j = k; j < c.words.size(); ++j)
            if (assignment_name(c.words[j]).empty() && c.words[j].rfind('-', 0) != 0 &&
                !(exporting && assigned_.count(c.words[j])))
                only_assignments = false;
        if (!only_assignments) return;
        for (std::size_t j = k; j < c.words.size(); ++j) {
            const std::string name = assignment_name(c.words[j]);
            if (name.empty()) {
                if (exporting && assigned_.count(c.words[j])) assigned_[c.words[j]].exported = true;
                continue;
            }
            std::string value = c.words[j].substr(name.size() + 1);
            if (value.empty() && vars_.count(name)) continue; // an array assigned just before
            // A command's output ($(hostname), `...`) is not known before the job runs: a value that is one
            // keeps $NAME as written; inside a longer value ("launch --np $((N * 8)) ...") it stays as
            // written, without its blanks, one word as bash's expansion would be.
            if (value.rfind("$(", 0) == 0 || value.find('`') != std::string::npos) {
                vars_.erase(name);
                assigned_.erase(name);
                continue;
            }
            if (value.find("$(") != std::string::npos) { // one pass: blanks inside $(...) dropped
                std::string kept;
                int depth = 0;
                for (std::size_t i = 0; i < value.size(); ++i) {
                    const char ch = value[i];
                    if (ch == '$' && i + 1 < value.size() && value[i + 1] == '(') {
                        ++depth;
                        kept += "$(";
                        ++i;
                        continue;
                    }
                    if (depth > 0 && ch == '(') ++depth;
                    if (depth > 0 && ch == ')') --depth;
                    if (depth > 0 && (ch == ' ' || ch == '\t' || ch == '\n')) continue;
                    kept += ch;
                }
                value = std::move(kept);
            }
            vars_[name] = {value};
            element_provenance_.erase(name);
            const Provenance& from = c.provenance[j];
            assigned_[name] = {
                value, c.line, exporting || (assigned_.count(name) && assigned_[name].exported),
                from.var == name && from.defaulted && !from.whole_value(c.words[j], name.size() + 1).empty()};
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
        // mpirun's one-dash options that take the next word (-np 8), -mca two words
        static const std::set<std::string> separate{"-np",          "-npernode", "-ppn",    "-hostfile",
                                                    "-machinefile", "-host",     "-map-by", "-bind-to",
                                                    "-rank-by",     "-wdir",     "-genv",   "-env"};
        if (launcher == "srun" && (w == "-mca" || w == "--mca") && k + 1 < words.size()) {
            out.push_back(words[k++]);
            if (k < words.size()) out.push_back(words[k++]);
            continue;
        }
        const bool has_value = w.find('=') != std::string::npos || flags.count(w) ||
                               (w.size() > 2 && w[1] != '-' && launcher != "python" &&
                                !(launcher == "srun" && separate.count(w))); // -n4
        if (!has_value && k < words.size() && words[k].rfind('-', 0) != 0) out.push_back(words[k++]);
    }
    return k;
}

// A word that is an option's value rather than an option: not starting with '-', or a negative number.
bool is_value_word(const std::string& w) {
    if (w.rfind('-', 0) != 0) return true;
    return w.size() > 1 && (is_digit(w[1]) || w[1] == '.');
}

// `name=value` with a Hydra/OmegaConf key (`train.micro_batch_size`, `+trainer.devices`, `++x.y`): the
// position of '=', else npos.
std::size_t key_value_eq(const std::string& w) {
    std::size_t i = 0;
    while (i < w.size() && (w[i] == '+' || w[i] == '~'))
        ++i;
    const std::size_t start = i;
    while (i < w.size() && (std::isalnum(static_cast<unsigned char>(w[i])) || w[i] == '_' || w[i] == '.' ||
                            (w[i] == '-' && i > start)))
        ++i;
    if (i == start || i >= w.size() || w[i] != '=' || !std::isalpha(static_cast<unsigned char>(w[start])))
        return std::string::npos;
    return i;
}

std::vector<ProgramArg> read_program_args(const std::vector<std::string>& words,
                                          const std::vector<Provenance>& provenance) {
    std::vector<ProgramArg> out;
    auto from_var = [&](std::size_t k, std::size_t from) {
        return k < provenance.size() ? provenance[k].whole_value(words[k], from) : std::string();
    };
    std::size_t k = 0;
    // `--name value` / `-b 8`: the next word is the value when it is one, else the option is a flag
    auto take_value = [&](ProgramArg& a) {
        if (k + 1 < words.size() && is_value_word(words[k + 1])) {
            a.value = words[++k];
            a.var = from_var(k, 0);
        } else {
            a.flag = true;
        }
    };
    for (; k < words.size(); ++k) {
        const std::string& w = words[k];
        ProgramArg a;
        if (w.rfind("--", 0) == 0 && w.size() >= 3) {
            const auto eq = w.find('=');
            if (eq != std::string::npos) {
                a.name = w.substr(0, eq);
                a.value = w.substr(eq + 1);
                a.var = from_var(k, eq + 1);
            } else {
                a.name = w;
                take_value(a);
            }
        } else if (w.size() >= 2 && w.size() <= 4 && w[0] == '-' &&
                   std::isalpha(static_cast<unsigned char>(w[1])) && w.find('=') == std::string::npos) {
            a.style = ArgStyle::Short; // -b 8 (llm.c), -ge 1
            a.name = w;
            take_value(a);
        } else if (const auto eq = key_value_eq(w); eq != std::string::npos) {
            a.style = ArgStyle::KeyValue;
            a.name = w.substr(0, eq);
            a.value = w.substr(eq + 1);
            a.var = from_var(k, eq + 1);
        } else {
            continue;
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
    // NAME=value before the command: the launch's own environment.
    std::map<std::string, ScriptVariable> inline_env;
    for (std::size_t j = 0; j < k; ++j)
        if (const std::string name = assignment_name(w[j]); !name.empty())
            inline_env[name] = {w[j].substr(name.size() + 1), c.line, true, false};
    std::vector<std::string> srun;
    const std::string first = basename(w[k]);
    if (first == "srun" || first == "mpirun" || first == "mpiexec") {
        srun.push_back(w[k]);
        k = take_options(w, k + 1, "srun", srun);
        if (k >= w.size()) return false;
    }
    // A wrapper that runs the command after its own words (conda run -n env, uv run, singularity exec
    // IMAGE, numactl ..., a site's run_with_environment.sh): the launch is the known launcher it runs.
    static const std::set<std::string> wrappers{
        "conda",   "mamba", "micromamba", "uv",     "poetry", "pixi",   "singularity", "apptainer",
        "numactl", "nsys",  "taskset",    "stdbuf", "nice",   "ionice", "timeout",     "env"};
    const std::string head = basename(w[k]);
    if (wrappers.count(head) || (head.size() > 3 && head.compare(head.size() - 3, 3, ".sh") == 0))
        for (std::size_t j = k + 1; j < w.size(); ++j) {
            const std::string b = basename(w[j]);
            if (is_python(w[j]) || b == "torchrun" || b == "deepspeed" || b == "accelerate") {
                k = j;
                break;
            }
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
        // srun ./train or srun some-binary: the program is the word after srun's options; a shell's own
        // command (cd, export: a command string's first steps behind the srun that runs the string) is none
        static const std::set<std::string> shell{"cd",     "export", "source", ".",     "set",
                                                 "echo",   "unset",  "true",   "false", "mkdir",
                                                 "ulimit", "eval",   "printf"};
        if (shell.count(launcher)) return false;
        launcher = "srun";
    } else {
        return false;
    }
    if (k >= w.size()) return false;
    out.launch_line = c.line;
    out.variables = std::move(inline_env);
    out.srun = std::move(srun);
    out.launcher = launcher;
    out.launcher_args = std::move(largs);
    out.program = w[k];
    // Redirections are the shell's, not the program's: `> log.txt`, `>>log`, `&> log`, `2>&1`, `1> f`.
    out.program_words.clear();
    out.stdout_redirect.clear();
    std::vector<Provenance> program_provenance;
    for (std::size_t j = k + 1; j < w.size(); ++j) {
        const std::string& word = w[j];
        const auto gt = word.find('>');
        const std::string fd = gt == std::string::npos ? "" : word.substr(0, gt);
        if (gt == std::string::npos ||
            !(fd.empty() || fd == "&" || std::all_of(fd.begin(), fd.end(), is_digit))) {
            out.program_words.push_back(word);
            program_provenance.push_back(j < c.provenance.size() ? c.provenance[j] : Provenance{});
            continue;
        }
        std::string target = word.substr(gt + 1);
        if (!target.empty() && target[0] == '>') target.erase(0, 1); // >>
        if (target.empty() && j + 1 < w.size()) target = w[++j];
        const bool stdout_too = fd.empty() || fd == "&" || fd == "1";
        if (stdout_too && target.rfind('&', 0) != 0 && target != "/dev/stdout") out.stdout_redirect = target;
    }
    out.program_args = read_program_args(out.program_words, program_provenance);
    // srun -o FILE / --output=FILE: the step's output goes to the file, not the job's
    for (std::size_t j = 1; j < out.srun.size(); ++j) {
        const std::string& o = out.srun[j];
        if ((o == "-o" || o == "--output") && j + 1 < out.srun.size()) out.stdout_redirect = out.srun[j + 1];
        if (o.rfind("--output=", 0) == 0) out.stdout_redirect = o.substr(9);
    }
    for (const auto& word : out.program_words)
        if (word == "$@" || word == "${@}" || word == "$*") out.forwards_arguments = true;
    return true;
}

// `[srun ...] bash -c STRING` (or sh): each command of the string, behind the same srun and on the command's
// line, given to `f` with the variables assigned up to it (the script's, then the string's own). False when
// the command runs no command string.
template <class F>
bool command_string(const Command& c, const Vars& vars, const std::map<std::string, ScriptVariable>& assigned,
                    F&& f) {
    const auto& w = c.words;
    std::size_t k = 0;
    while (k < w.size() && (!assignment_name(w[k]).empty() || w[k] == "exec"))
        ++k;
    std::vector<std::string> srun;
    if (k < w.size() && (basename(w[k]) == "srun" || basename(w[k]) == "mpirun")) {
        srun.push_back(w[k]);
        k = take_options(w, k + 1, "srun", srun);
    }
    if (k + 2 >= w.size() || !(basename(w[k]) == "bash" || basename(w[k]) == "sh") || w[k + 1] != "-c")
        return false;
    Lexer inner(w[k + 2], vars, assigned);
    while (auto one = inner.next()) {
        Command behind;
        behind.words = srun;
        behind.provenance.resize(srun.size());
        behind.words.insert(behind.words.end(), one->words.begin(), one->words.end());
        behind.provenance.insert(behind.provenance.end(), one->provenance.begin(), one->provenance.end());
        behind.line = c.line;
        f(behind, inner.assigned());
    }
    return true;
}

} // namespace

std::optional<long long> plain_integer(const std::string& s) {
    if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), is_digit)) return std::nullopt;
    return std::stoll(s);
}

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
        int rank = -1;
        bool in_loop = false;
        bool in_string = false;
        std::map<std::string, ScriptVariable> assigned; // the variables assigned up to it
    };
    Launch taken;                  // the best so far (the variables are copied for it alone)
    std::vector<int> launch_lines; // every launch's line
    std::size_t taken_index = 0;
    int loops = 0;
    int command_strings = 0; // read at most kCommandStrings of them: each starts from a copy of the variables
    constexpr int kCommandStrings = 64;
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
    Lexer lexer(text);
    while (const auto next = lexer.next()) {
        const Command& c = *next;
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
        // cd /an/absolute/path before the launch (in a command string too)
        auto note_cd = [&](const Command& one) {
            const auto& w = one.words;
            const auto cd = std::find(w.begin(), w.end(), "cd"); // (behind the srun that runs its string)
            if (cd == w.end() || cd + 1 == w.end() || (cd != w.begin() && basename(w[0]) != "srun")) return;
            if ((cd + 1)->rfind('/', 0) == 0 && out.absolute_cd.empty() && launch_lines.empty()) {
                out.absolute_cd = *(cd + 1);
                out.absolute_cd_line = one.line;
            }
        };
        note_cd(c);
        auto launch = [&](const Command& one, bool in_string,
                          const std::map<std::string, ScriptVariable>& assigned) {
            BatchScript l;
            if (!read_launch(one, l)) return;
            const bool distributed =
                l.launcher == "torchrun" || l.launcher == "deepspeed" || l.launcher == "accelerate";
            const int rank = distributed ? 2 : !l.srun.empty() ? 1 : 0;
            launch_lines.push_back(l.launch_line);
            if (rank > taken.rank) {
                taken = {std::move(l), rank, loops > 0, in_string, assigned};
                taken_index = launch_lines.size() - 1;
            }
        };
        const bool string_read =
            command_strings < kCommandStrings &&
            command_string(c, lexer.vars(), lexer.assigned(),
                           [&](const Command& one, const std::map<std::string, ScriptVariable>& assigned) {
                               note_cd(one);
                               launch(one, true, assigned);
                           });
        if (string_read)
            ++command_strings;
        else
            launch(c, false, lexer.assigned());
    }
    if (taken.rank < 0) return out;
    for (std::size_t k = 0; k < launch_lines.size(); ++k)
        if (k != taken_index) out.other_launch_lines.push_back(launch_lines[k]);
    auto& t = taken.read;
    out.launch_line = t.launch_line;
    out.srun = t.srun;
    out.launcher = t.launcher;
    out.launcher_args = t.launcher_args;
    out.program = t.program;
    out.program_words = t.program_words;
    out.program_args = t.program_args;
    out.forwards_arguments = t.forwards_arguments;
    out.stdout_redirect = t.stdout_redirect;
    out.launch_in_loop = taken.in_loop;
    out.launch_in_command_string = taken.in_string;
    out.variables = taken.assigned;
    for (const auto& [name, v] : t.variables) // the launch line's own NAME=value
        out.variables[name] = v;
    if (const auto port = out.variables.find("MASTER_PORT");
        out.fixed_port.empty() && port != out.variables.end() && literal_port(port->second.value)) {
        out.fixed_port = port->second.value;
        out.fixed_port_line = port->second.line;
    }
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
