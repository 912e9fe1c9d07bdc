#include "slurm/user_jobs.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <set>

namespace infrarsi::slurm {

std::optional<double> slurm_time_epoch(const std::string& t) {
    std::tm tm{};
    if (t.size() < 19 || !strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return std::nullopt;
    tm.tm_isdst = -1;
    const std::time_t e = std::mktime(&tm);
    if (e == static_cast<std::time_t>(-1)) return std::nullopt;
    return static_cast<double>(e);
}

std::vector<UserJob> parse_user_jobs(const std::string& out) {
    std::vector<UserJob> jobs;
    std::size_t pos = 0;
    while (pos < out.size()) {
        const auto eol = out.find('\n', pos);
        const std::string line = out.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
        pos = eol == std::string::npos ? out.size() : eol + 1;
        const auto a = line.find('|');
        const auto b = a == std::string::npos ? a : line.find('|', a + 1);
        if (b == std::string::npos || line.find('|', b + 1) != std::string::npos) continue;
        UserJob j;
        j.job_id = line.substr(0, a);
        j.submitted = line.substr(a + 1, b - a - 1);
        j.state = line.substr(b + 1);
        // sacct's step lines ("123.batch") are not jobs; an id is digits, with "_task" or "_[range]".
        if (j.job_id.empty() || j.job_id.find('.') != std::string::npos ||
            !std::isdigit(static_cast<unsigned char>(j.job_id[0])))
            continue;
        const auto e = slurm_time_epoch(j.submitted);
        if (!e) continue;
        j.submitted_epoch = *e;
        jobs.push_back(std::move(j));
    }
    return jobs;
}

std::vector<UserJob> user_jobs_submitted_since(double since_epoch, bool accounting) {
    ProcessOptions o;
    o.timeout = std::chrono::seconds(60);
    auto sq = run_process({"squeue", "--me", "-h", "-t", "all", "-o", "%i|%V|%T"}, o);
    if (!sq.ok()) throw Error("squeue failed: " + sq.err, "squeue --me");
    auto jobs = parse_user_jobs(sq.out);
    if (accounting) {
        const std::time_t since = static_cast<std::time_t>(since_epoch);
        std::tm tm{};
        localtime_r(&since, &tm);
        char start[32];
        std::strftime(start, sizeof start, "%Y-%m-%dT%H:%M:%S", &tm);
        // Not fatal: accounting may lag or be down; squeue still tells the recent ones.
        auto sa = run_process({"sacct", "-X", "-n", "-P", "-S", start, "-o", "JobID,Submit,State"}, o);
        if (sa.ok()) {
            auto more = parse_user_jobs(sa.out);
            jobs.insert(jobs.end(), more.begin(), more.end());
        }
    }
    std::erase_if(jobs, [&](const UserJob& j) { return j.submitted_epoch < since_epoch; });
    return jobs;
}

std::vector<UserJob> jobs_not_submitted_by(const std::vector<UserJob>& jobs,
                                           const std::vector<std::string>& own, double from_epoch,
                                           double to_epoch) {
    const std::set<std::string> mine(own.begin(), own.end());
    std::set<std::string> seen;
    std::vector<UserJob> out;
    for (const auto& j : jobs) {
        const std::string base = j.job_id.substr(0, j.job_id.find('_'));
        if (mine.count(base) || mine.count(j.job_id)) continue;
        if (j.submitted_epoch < from_epoch || j.submitted_epoch > to_epoch) continue;
        if (!seen.insert(base).second) continue;
        out.push_back(j);
    }
    return out;
}

} // namespace infrarsi::slurm
