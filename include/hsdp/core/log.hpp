#pragma once
// Rank-aware logging: rank 0 prints info and warnings; any rank prints errors, prefixed with its rank and
// host so a message from a 512-rank job says where it came from. Passed by reference, never global.
#include <iostream>
#include <sstream>
#include <string>
#include <utility>

namespace hsdp {

class Logger {
 public:
  Logger(int rank, std::string host, std::ostream& out = std::cout, std::ostream& err = std::cerr);

  int rank() const { return rank_; }
  const std::string& host() const { return host_; }
  bool is_root() const { return rank_ == 0; }

  template <typename... Args>
  void info(Args&&... args) const {
    if (rank_ == 0) write(out_, "", concat(std::forward<Args>(args)...));
  }
  template <typename... Args>
  void warn(Args&&... args) const {
    if (rank_ == 0) write(err_, "warning: ", concat(std::forward<Args>(args)...));
  }
  // Printed by whichever rank calls it, prefixed "[rank R@host]".
  template <typename... Args>
  void error(Args&&... args) const {
    write(err_, prefix() + "error: ", concat(std::forward<Args>(args)...));
  }
  // A rank-prefixed line that is not an error (e.g. a watchdog diagnosis from every rank).
  template <typename... Args>
  void any_rank(Args&&... args) const {
    write(err_, prefix(), concat(std::forward<Args>(args)...));
  }

  std::string prefix() const { return "[rank " + std::to_string(rank_) + "@" + host_ + "] "; }

  template <typename... Args>
  static std::string concat(Args&&... args) {
    std::ostringstream s;
    (s << ... << std::forward<Args>(args));
    return s.str();
  }

 private:
  static void write(std::ostream& stream, const std::string& lead, const std::string& text);
  int rank_;
  std::string host_;
  std::ostream& out_;
  std::ostream& err_;
};

std::string host_name();

}  // namespace hsdp
