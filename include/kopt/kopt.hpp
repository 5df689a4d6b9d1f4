#pragma once
/// \file
/// Everything public in kopt.

#include <kopt/adam_config.hpp>
#include <kopt/algorithm_config.hpp>
#include <kopt/communicator.hpp>
#include <kopt/error.hpp>
#include <kopt/fused_adam.hpp>
#include <kopt/fused_optimizer.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <kopt/loss_scaler.hpp>
#include <kopt/offload_options.hpp>
#include <kopt/param_group.hpp>
#include <kopt/runtime.hpp>
#include <kopt/shard_layout.hpp>
#include <kopt/sharding.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>
#include <kopt/tensor.hpp>
#include <kopt/version.hpp>
