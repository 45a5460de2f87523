// Damaged and mismatched checkpoints: every rank throws the same checkpoint Error, naming the file and dataset.
// Also: writers that overlap, retention, `latest` and resolve_resume.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fixtures.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/commit.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "mpi_context.hpp"

namespace hsdp::ckpt::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Saves a disjoint-split checkpoint of the tiny model at `step` into `dir`; returns its path.
std::string save_tiny(const SharedDir& dir, std::int64_t step, const SaveOptions& options = {}) {
  const model::ModelLayout layout(tiny_config());
  RankShards mine(ranges_for(Split::disjoint, layout, mpi().rank, mpi().size));
  mine.fill(step);
  return save_checkpoint(MPI_COMM_WORLD, dir.str(), layout, mine.shards, true, state_for(step, mpi().size), options)
      .path;
}

std::string load_error(const std::string& path, const model::GptConfig& config = tiny_config()) {
  const model::ModelLayout layout(config);
  RankShards mine(ranges_for(Split::replicas, layout, mpi().rank, mpi().size));
  return checkpoint_error([&] { load_checkpoint(MPI_COMM_WORLD, path, layout, mine.shards); });
}

// Rank 0 changes the file; the others wait.
template <typename Change>
void on_rank0(Change&& change) {
  if (mpi().rank == 0) change();
  MPI_Barrier(MPI_COMM_WORLD);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

TEST(Damage, FlippedByteInsideAModelDataset_IsACheckpointErrorNamingFileAndDataset) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  const std::string dataset = "/model/transformer.h.0.attn.c_proj.weight";
  on_rank0([&] {
    const DatasetInfo where = dataset_location(path, dataset);
    flip_byte(path, where.file_offset + where.bytes / 2 + 1);
  });
  const std::string error = load_error(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr(dataset));
  EXPECT_THAT(error, HasSubstr("checksum"));
}

// Replaces the int64 attribute /meta/<name> of the file by another value, as an editor (h5py, HDFView) would.
void set_meta_attribute(const std::string& path, const char* name, std::int64_t value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t meta = H5Gopen2(file, "/meta", H5P_DEFAULT);
  ASSERT_GE(meta, 0);
  EXPECT_GE(H5Adelete(meta, name), 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(meta, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Gclose(meta);
  H5Fclose(file);
}

// The metadata a resume relies on are covered by a checksum too: a step edited from 20 to 5 (it would resume at
// step 5 with step-20 weights) or to 2^62 (it would train nothing and exit 0) is refused; a negative one is refused
// by its range, as in files written before the checksum.
TEST(Damage, EditedStepInTheMetadata_IsACheckpointError) {
  for (const std::int64_t edited : {std::int64_t{5}, std::int64_t{1} << 62, std::int64_t{-3}}) {
    SharedDir dir;
    const std::string path = save_tiny(dir, 20);
    EXPECT_EQ(load_error(path), "no error");
    on_rank0([&] { set_meta_attribute(path, "step", edited); });
    const std::string error = load_error(path);
    EXPECT_THAT(error, HasSubstr(path));
    EXPECT_THAT(error, HasSubstr(edited < 0 ? "/meta step -3 is negative" : "do not match meta_checksum")) << edited;
    const std::string verify = checkpoint_error([&] { inspect_checkpoint(path); });
    EXPECT_NE(verify, "no error") << "inspect/verify must refuse it too";
  }
}

// A dataset replaced by a soft link to another dataset of the same shape (it once stalled a resume until
// checkpoint.timeout_s, and verify said MPI_ERR_TYPE): refused by load, inspect and verify, naming the link.
TEST(Damage, DatasetReplacedByASoftLink_IsACheckpointErrorNamingIt) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 7);
  const std::string name = "/model/transformer.h.1.attn.c_proj.weight";
  on_rank0([&] {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    EXPECT_GE(H5Ldelete(file, name.c_str(), H5P_DEFAULT), 0);
    EXPECT_GE(H5Lcreate_soft("/model/transformer.h.0.attn.c_proj.weight", file, name.c_str(), H5P_DEFAULT,
                             H5P_DEFAULT),
              0);
    H5Fclose(file);
  });
  const std::string error = load_error(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr(name + " is a soft link to /model/transformer.h.0.attn.c_proj.weight"));
  EXPECT_THAT(checkpoint_error([&] { inspect_checkpoint(path); }), HasSubstr(name + " is a soft link"));
}

TEST(Damage, FlippedByteInsideAnOptimizerDataset_IsACheckpointErrorNamingFileAndDataset) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  const std::string dataset = "/optim/exp_avg_sq/transformer.wte.weight";
  on_rank0([&] {
    const DatasetInfo where = dataset_location(path, dataset);
    flip_byte(path, where.file_offset + where.bytes - 2);  // the last row: vocab_size - 1
  });
  const std::string error = load_error(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr(dataset));
}

TEST(Damage, FlippedByteInARangeNoRankLoads_IsStillFound) {
  // The ranks load everything but block 0 (unit 1); its datasets are read into scratch memory to be verified.
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  const model::ModelLayout layout(tiny_config());
  std::vector<Range> partial;
  for (const Range& r : ranges_for(Split::interleaved, layout, mpi().rank, mpi().size)) {
    if (r.unit != model::ModelLayout::block_unit(0)) partial.push_back(r);
  }
  {
    RankShards mine(partial);
    EXPECT_EQ(checkpoint_error([&] { load_checkpoint(MPI_COMM_WORLD, path, layout, mine.shards); }), "no error");
    EXPECT_EQ(mine.mismatches(layout, 5), 0u);
  }
  const std::string dataset = "/optim/exp_avg/transformer.h.0.mlp.c_fc.weight";
  on_rank0([&] {
    const DatasetInfo where = dataset_location(path, dataset);
    flip_byte(path, where.file_offset + 7);
  });
  RankShards mine(partial);
  const std::string error = checkpoint_error([&] { load_checkpoint(MPI_COMM_WORLD, path, layout, mine.shards); });
  EXPECT_THAT(error, HasSubstr(dataset));
  EXPECT_THAT(error, HasSubstr("checksum"));
}

TEST(Damage, TruncatedFile_IsACheckpointErrorNamingFileAndTheFirstDatasetCutOff) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  const std::string dataset = "/optim/exp_avg_sq/transformer.h.1.mlp.c_fc.weight";
  on_rank0([&] {
    const DatasetInfo where = dataset_location(path, dataset);
    fs::resize_file(path, where.file_offset + where.bytes / 2);
  });
  const std::string error = load_error(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("truncated"));
  EXPECT_THAT(error, HasSubstr(dataset));
}

TEST(Damage, FileCutInsideItsMetadata_IsStillACheckpointErrorNamingTheFile) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  on_rank0([&] { fs::resize_file(path, 100); });
  const std::string error = load_error(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("truncated"));
}

TEST(Damage, NotAnHdf5File_IsACheckpointError) {
  SharedDir dir;
  on_rank0([&] { std::ofstream(dir / "step_1.h5") << "not a checkpoint\n"; });
  const std::string error = load_error(dir / "step_1.h5");
  EXPECT_THAT(error, HasSubstr("not an HDF5 file"));
}

TEST(Damage, MissingFile_IsACheckpointError) {
  SharedDir dir;
  EXPECT_THAT(load_error(dir / "step_9.h5"), HasSubstr("does not exist"));
}

// Another model shape is a config error (the deck asks for another model; the file is not damaged), naming the file
// and both shapes from /meta, before any dataset is read.
TEST(Mismatch, CheckpointOfAnotherShape_NamesFileAndBothShapes) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  model::GptConfig other = tiny_config();
  other.block_size = 16;
  const std::string error = load_error(path, other);
  EXPECT_THAT(error, HasSubstr("an Error of kind config"));
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("it holds n_layer 2, n_head 2, n_embd 16, block_size 8, vocab_size 50"));
  EXPECT_THAT(error, HasSubstr("the model is n_layer 2, n_head 2, n_embd 16, block_size 16, vocab_size 50"));
}

// Fewer layers than the checkpoint's: every dataset the smaller model asks for exists with its shape, so only /meta
// tells (before, such a resume trained the first blocks of the checkpoint as if they were the whole model).
TEST(Mismatch, CheckpointWithMoreLayers_IsAnotherShape) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  model::GptConfig other = tiny_config();
  other.n_layer = 1;
  const std::string error = load_error(path, other);
  EXPECT_THAT(error, HasSubstr("was written for another model shape: it holds n_layer 2"));
  EXPECT_THAT(error, HasSubstr("the model is n_layer 1"));
}

TEST(Mismatch, CheckpointWithAnotherHeadCount_NamesFileAndHeadCount) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  model::GptConfig other = tiny_config();
  other.n_head = 4;
  const std::string error = load_error(path, other);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("n_head"));
}

TEST(Mismatch, OtherPaddedVocabulary_LoadsBecausePaddingIsNotSaved) {
  SharedDir dir;
  const std::string path = save_tiny(dir, 5);
  model::GptConfig other = tiny_config();
  other.padded_vocab_size = 56;
  EXPECT_EQ(load_error(path, other), "no error");
}

TEST(Writers, OverlappingWriters_AreAnInternalErrorOnEveryRank) {
  if (mpi().size < 2) GTEST_SKIP() << "needs two ranks";
  SharedDir dir;
  const model::ModelLayout layout(tiny_config());
  RankShards mine(ranges_for(Split::whole, layout, mpi().rank, mpi().size));
  const std::string error = checkpoint_error(
      [&] { save_checkpoint(MPI_COMM_WORLD, dir.str(), layout, mine.shards, true, state_for(1, mpi().size)); });
  EXPECT_THAT(error, HasSubstr("kind internal"));
  EXPECT_THAT(error, HasSubstr("overlap"));
  EXPECT_FALSE(fs::exists(dir / "latest"));
}

TEST(Writers, NoWriterForSomeRange_IsAnInternalError) {
  SharedDir dir;
  const model::ModelLayout layout(tiny_config());
  RankShards mine(ranges_for(Split::disjoint, layout, mpi().rank, mpi().size));
  const std::string error = checkpoint_error([&] {
    save_checkpoint(MPI_COMM_WORLD, dir.str(), layout, mine.shards, mpi().rank != 0, state_for(1, mpi().size));
  });
  EXPECT_THAT(error, HasSubstr("exactly one replica"));
}

TEST(Retention, KeepTwoAndEveryThird_LeavesMilestonesAndTheNewest) {
  SharedDir dir;
  SaveOptions options;
  options.keep = 2;
  options.keep_every = 3;
  for (std::int64_t step = 1; step <= 7; ++step) save_tiny(dir, step, options);
  EXPECT_EQ(list_checkpoint_steps(dir.str()), (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(read_latest(dir.str()), std::optional<std::string>("step_7.h5"));
  EXPECT_FALSE(fs::exists(dir / "latest.tmp"));
  EXPECT_FALSE(fs::exists(dir / "step_7.h5.tmp"));
}

TEST(Retention, KeepZero_KeepsEverything) {
  SharedDir dir;
  SaveOptions options;
  options.keep = 0;
  for (std::int64_t step = 1; step <= 4; ++step) save_tiny(dir, step, options);
  EXPECT_EQ(list_checkpoint_steps(dir.str()), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

TEST(Resume, AutoNoneAndPath_ResolveOnEveryRank) {
  SharedDir dir;
  EXPECT_EQ(resolve_resume(MPI_COMM_WORLD, dir.str(), "auto"), std::nullopt);  // no `latest` yet
  save_tiny(dir, 2);
  save_tiny(dir, 4);
  EXPECT_EQ(resolve_resume(MPI_COMM_WORLD, dir.str(), "auto"), std::optional<std::string>(dir / "step_4.h5"));
  EXPECT_EQ(resolve_resume(MPI_COMM_WORLD, dir.str(), "none"), std::nullopt);
  EXPECT_EQ(resolve_resume(MPI_COMM_WORLD, dir.str(), dir / "step_2.h5"),
            std::optional<std::string>(dir / "step_2.h5"));
  EXPECT_THAT(checkpoint_error([&] { resolve_resume(MPI_COMM_WORLD, dir.str(), dir / "step_3.h5"); }),
              HasSubstr("does not exist"));
  on_rank0([&] { fs::remove(dir / "step_4.h5"); });
  EXPECT_THAT(checkpoint_error([&] { resolve_resume(MPI_COMM_WORLD, dir.str(), "auto"); }),
              HasSubstr("step_4.h5, which does not exist"));
}

}  // namespace
}  // namespace hsdp::ckpt::testing
