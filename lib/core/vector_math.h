// erf of an fp64 CPU tensor through glibc's vector math library (libmvec: four doubles a call
// with AVX2, two without), where Debian's LibTorch evaluates it one element at a time (at::erf
// ~11 ns an element on the 2-core CI machine, libmvec's AVX2 erf ~1.5 ns). The values are within
// a few ulp of at::erf's, not bit for bit (tests/test_vector_math.cpp measures the bound). Any
// other dtype or device, or a build without libmvec, takes at::erf. Not differentiable: the caller
// (lib/model/gelu.cpp) writes the derivative itself.
#pragma once

#include <ATen/ATen.h>

namespace magic {

at::Tensor vector_erf(const at::Tensor& x);

// Whether vector_erf runs libmvec in this build (x86-64 with glibc's libmvec), for tests.
bool vector_math_available();

}  // namespace magic
