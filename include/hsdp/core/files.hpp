#pragma once
// Checks on the paths tools read and write, before anything opens them; a fingerprint to compare texts across ranks.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "hsdp/core/error.hpp"

namespace hsdp {

// A path to read must be a regular file when it exists (a FIFO would block the read forever; a device or a
// directory is not data): else an Error of `kind` "<what>: '<path>' is a FIFO, not a regular file". A path that
// does not exist is left to the caller's open, whose message says so.
void require_regular_input(const std::string& path, std::string_view what, ErrorKind kind = ErrorKind::data);
// A path to write (through a temporary file renamed over it) must be new or a regular file: else a config Error
// naming it (the rename would replace a device node such as /dev/full, a FIFO or a socket with a regular file).
void require_regular_output(const std::string& path, std::string_view what);

// An output holding an HDF5 file (a checkpoint: step_N.h5, a consolidated or imported one) is never written over: a
// config Error "<what>: '<path>' is an HDF5 file (a checkpoint?), which <tool> never writes over: ...".
void require_not_checkpoint(const std::string& path, std::string_view what, std::string_view tool);
// Paths that options name, inputs and outputs in the order the message should name them: a config Error where two
// name the same file (".." and symbolic links resolved; where a path cannot be resolved it is compared with none)
// "<later> '<path>' is the file <earlier> names: give <later> a path of its own". An output must not replace an input,
// nor another output; nor may the temporary file "<output>.tmp" a `written` path is first written to (the atomic
// writes below, the checkpoint writer) be an input.
struct NamedPath {
  std::string option;
  std::filesystem::path path;
  bool written = false;  // an output: "<path>.tmp" is compared too
};
void require_distinct_files(std::span<const NamedPath> paths);

// Writes `bytes` to "<path>.tmp", fsyncs it, renames it over `path` and fsyncs the directory: a failed write (a full
// disk) removes the temporary file and leaves `path` as it was, and so does a process killed before the rename; after
// a return the new bytes survive a machine crash. False and the reason ("cannot write '<path>.tmp': No space left on
// device") on failure. `pieces` are written one after the other (a header and a body without copying them together).
bool try_write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces,
                               std::string* reason);
bool try_write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string* reason);
// The same, a data Error with the reason on failure.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces);
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// fsyncs a directory, so that the renames and removals in it survive a machine crash: false and the reason ("cannot
// fsync directory '<dir>': ...") on failure.
bool try_fsync_directory(const std::filesystem::path& dir, std::string* reason);

// FNV-1a over 64 bits: a fingerprint of a text, to compare what ranks were given (hsdp-train's deck and build);
// not a checksum against damage (ckpt/checksum.hpp is).
std::uint64_t fingerprint(std::string_view bytes);

}  // namespace hsdp
