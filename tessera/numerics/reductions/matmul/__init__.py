"""The correctly rounded matrix product, independent of BLAS, threads and blocking.

Method (:func:`.product.matmul_rounded`): widen both operands exactly to float64 and
multiply with BLAS, a panel of rows at a time (the panel stays in cache while it is
decided). Each element is then settled by the cheapest of these arguments (1 and 2 in
:mod:`.interval`, 3 and 4 in :mod:`.dots`):

1. **Exactness** (operands whose products are exact in float64 and narrow enough for
   the test to pass: bf16, fp8, fp6, fp4, int8, often f16). Every entry of row i of A
   is a multiple of 2**qA_i (from its smallest nonzero magnitude and the format's
   precision), every entry of column j of B of 2**qB_j, so every product and every
   partial sum of products, in any order, is a multiple of Q_ij = 2**(qA_i + qB_j). If
   ``||A_i||_2 ||B_j||_2`` (Cauchy-Schwarz: at least the sum of |products|) is below
   2**53 Q_ij, each of those partial sums is a float64: BLAS returns the exact value,
   which is rounded directly (exact ties included). With alpha_i = ||A_i|| / 2**qA_i
   and beta_j likewise, the test is alpha_i beta_j < 2**53 (less a margin for the
   norms' rounding): O(MK + KN) statistics, then per row a binary search in the sorted
   beta finds the few columns that may fail, and only those are tested one by one.
2. **Interval**. For any order, |fl(AB) - AB| <= gamma_K |A||B| (Higham, Accuracy and
   Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 3.5), and Cauchy-Schwarz
   gives (|A||B|)_ij <= ||A_i||_2 ||B_j||_2. Rounding is monotone: when both ends of the
   interval round alike, that is the result. The test runs with one bound per row (the
   row's norm times the largest column norm: no M x N bound array), then with each
   element's own bound for the few left (for 1024^3 standard normal f32 operands
   0.07%).
3. **Pairwise** (exact products, targets narrower than float64): the products of an
   open element summed by a pairwise tree, error at most gamma_{ceil(log2 K)} times the
   sum of |products|, and for narrow inputs exact where the smallest quantum of the
   element's own products proves it.
4. **Double-double** (:func:`.dots.rounded_dots`): the exact products (or Dekker's two
   parts of each product, for wider operands) summed by ``exact.refine_sum``; where
   that is not decisive, the same sum with a proof that it is exact, rounded exactly by
   ``round_double_double``; Fractions only for what none of these settles (overflow,
   non-finite values, exponent ranges beyond about 100 bits).

Costs (1024^3, one BLAS thread): a float32 target costs one float64 GEMM (about 2.1x an
sgemm) plus about 40% for f32 operands, 20-30% for bf16, f16 and fp8 ones. A float64
target is decided by the exactness test where it holds and otherwise takes the
double-double level, O(M*N*K) NumPy work (about 2 microseconds per element per 256 of
K). Work arrays up to 32 MiB are kept per thread between calls
(:func:`.operands.scratch`).
"""
