#include "hsdp/comm/agree.hpp"

#include <climits>
#include <string>

namespace hsdp::comm {

void agree(MPI_Comm comm, const std::function<void()>& step) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int kind = -1;
  std::string message;
  try {
    step();
  } catch (const AgreedError&) {
    throw;  // every rank threw it: every rank leaves here, none waits in the allreduce below
  } catch (const Error& e) {
    kind = static_cast<int>(e.kind());
    message = e.what();
  } catch (const std::exception& e) {
    kind = static_cast<int>(ErrorKind::internal);
    message = e.what();
  }
  const int mine = kind >= 0 ? rank : INT_MAX;
  int failing = INT_MAX;
  MPI_Allreduce(&mine, &failing, 1, MPI_INT, MPI_MIN, comm);
  if (failing == INT_MAX) return;

  int length = static_cast<int>(message.size());
  MPI_Bcast(&kind, 1, MPI_INT, failing, comm);
  MPI_Bcast(&length, 1, MPI_INT, failing, comm);
  message.resize(static_cast<std::size_t>(length));
  MPI_Bcast(message.data(), length, MPI_CHAR, failing, comm);
  if (failing != 0) message = "(on rank " + std::to_string(failing) + ") " + message;
  throw AgreedError(static_cast<ErrorKind>(kind), message);
}

}  // namespace hsdp::comm
