#include "agree.hpp"

#include <vector>

namespace hsdp::ckpt {

void agree(MPI_Comm comm, const std::optional<Failure>& local) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = local ? rank : size;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  int header[2] = {0, 0};  // kind, message length
  if (rank == first) header[0] = static_cast<int>(local->kind), header[1] = static_cast<int>(local->message.size());
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  std::vector<char> text(static_cast<std::size_t>(header[1]));
  if (rank == first) text.assign(local->message.begin(), local->message.end());
  MPI_Bcast(text.data(), header[1], MPI_CHAR, first, comm);
  throw AgreedError(static_cast<ErrorKind>(header[0]), std::string(text.begin(), text.end()));
}

}  // namespace hsdp::ckpt
