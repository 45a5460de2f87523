# Included by src/comm/CMakeLists.txt when NCCL is found. NcclCommunicator (intra-node collectives on device buffers) and
# make_inter_node_communicator (comm.inter = nccl | mpi, CUDA-aware MPI or staging through pinned host memory), and
# CudaStaging (StagedCommunicator's copies on a GPU), DeviceSelfCommunicator (a group of one on device memory).
add_library(hsdp_comm_nccl ${CMAKE_CURRENT_LIST_DIR}/nccl.cpp ${CMAKE_CURRENT_LIST_DIR}/inter_node.cpp
            ${CMAKE_CURRENT_LIST_DIR}/staging.cpp ${CMAKE_CURRENT_LIST_DIR}/self.cpp)
target_link_libraries(hsdp_comm_nccl PUBLIC hsdp_comm hsdp_device_cuda hsdp::nccl PRIVATE hsdp_warnings)
