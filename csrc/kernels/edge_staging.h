// What both CUDA edges paths share (edge_bins.cu: the two stages; edge_histogram.cu: the one pass): the shape of a
// block's cell tables, how many cells each dim gets within a budget, and the count of edges below a cell. Host and
// device; no torch header.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../common/edge_binning.h"

namespace dsmhist {

// Where each dim's table lies in shared memory, and whether the edges are staged there too.
struct EdgeTableShape {
  int32_t cells[kMaxEdgeDims] = {};
  int32_t table_offset[kMaxEdgeDims] = {};  // dim d's table: cells[d] + 1 ints from here
  int32_t table_ints = 0;
  bool edges_in_shared = false;
};

DSMHIST_HD int64_t round_up16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Table slots (one a cell, plus one a dim) for `cells_per_edge` cells an edge in every dim (`wanted`), and the least
// a staging accepts: a cell per four edges.
inline void table_slots_of(const EdgeBinParams& p, int64_t cells_per_edge, int64_t* wanted, int64_t* least) {
  *wanted = *least = 0;
  for (int d = 0; d < p.dims; ++d) {
    const int64_t edges = p.edge_offset[d + 1] - p.edge_offset[d];
    *wanted += std::max<int64_t>(edges * cells_per_edge, 1) + 1;
    *least += std::max<int64_t>(edges / 4, 1) + 1;
  }
}

// Each dim's cells within `slots` table slots: cells_per_edge cells an edge where they fit, fewer (in proportion)
// where they do not. table_offset and table_ints count slots.
inline EdgeTableShape cells_within(const EdgeBinParams& p, int64_t slots, bool edges_in_shared,
                                   int64_t cells_per_edge) {
  EdgeTableShape shape;
  shape.edges_in_shared = edges_in_shared;
  int64_t wanted = 0, least = 0;
  table_slots_of(p, cells_per_edge, &wanted, &least);
  slots = std::max<int64_t>(slots, 2 * p.dims);
  int32_t offset = 0;
  for (int d = 0; d < p.dims; ++d) {
    const int64_t cells_wanted = std::max<int64_t>((p.edge_offset[d + 1] - p.edge_offset[d]) * cells_per_edge, 1);
    const int64_t cells =
        wanted <= slots ? cells_wanted : std::max<int64_t>(1, (cells_wanted + 1) * slots / wanted - 1);
    shape.cells[d] = static_cast<int32_t>(cells);
    shape.table_offset[d] = offset;
    offset += shape.cells[d] + 1;
  }
  shape.table_ints = offset;
  return shape;
}

// How many of a dim's `count` sorted edges lie in cells below c, for a monotone cell function cell_of: a lower bound
// over the edges' cells, which sorted edges keep in order. (Unsorted edges give some count in [0, count]: unspecified
// bins, still inside the output.) Both paths build their cell tables with it, each with its own cell function.
template <typename E, typename I, typename CellOf>
DSMHIST_HD I edges_below_cell(const E* edges, I count, int32_t c, const CellOf& cell_of) {
  I lo = 0, n = count;
  while (n > 0) {
    const I half = n >> 1;
    const bool below = cell_of(edges[lo + half]) < c;
    lo = below ? lo + half + 1 : lo;
    n = below ? n - half - 1 : half;
  }
  return lo;
}

}  // namespace dsmhist
