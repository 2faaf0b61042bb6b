// strata/core/impl/reduce.ipp — in the compiled mode, the kernels of every element type, typed and
// type-erased, once.
// Included at the end of core/reduce.hpp (header-only: nothing to add, each unit instantiates
// the types it uses) or by impl/src.hpp after it (compiled), never on its own.
#pragma once

#if !STRATA_HEADER_ONLY
namespace strata {
STRATA_FOR_EVERY_ELEMENT(STRATA_REDUCE_KERNELS, )
STRATA_FOR_EVERY_ELEMENT(STRATA_ERASED_KERNELS, )
}  // namespace strata
#endif
