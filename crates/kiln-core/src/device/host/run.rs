//! Running a compiled kernel over lanes on the host's pool: plain block launches, launches in
//! 2-d tiles, exact ranges (nothing written past a range's end) and the split launches of stencil
//! groups. Everything here passes host pointers to the kernels, which is why it lives in the host
//! device; the block and tile sizes it uses are `launch`'s policy.

use crate::backend::{CompiledKernel, LaunchArgs};
use crate::launch::{can_tile, for_blocks, pool, threads, DEFAULT_BLOCK, TILE, TILE_LANES};
use rayon::prelude::*;

/// Run a compiled kernel over `[0, n)`.
///
/// # Safety
/// `args` must describe live buffers matching the kernel (see [`CompiledKernel::run`]) for all `n`
/// lanes.
pub unsafe fn launch(kernel: &dyn CompiledKernel, args: &LaunchArgs, n: usize, block: usize) {
    // SAFETY: forwarded to the caller; blocks cover disjoint lane ranges.
    for_blocks(n, block, |s, e| unsafe {
        kernel.run(args, s as u64, e as u64)
    });
}

/// Rows of a band in a tiled launch of `rows` rows: tall (512) so that each source line is
/// reused by 16 rows before the band moves on, but short enough that every thread gets at least
/// two bands, and never below [`TILE`].
fn band_rows(rows: usize) -> usize {
    let threads = pool().current_num_threads().max(1);
    rows.div_ceil(2 * threads).clamp(TILE, 512)
}

/// Run a compiled kernel over `[0, n)` seen as rows of `cols` lanes, in tiles of
/// [`TILE_LANES`] lanes × [`band_rows`] rows: each task takes a band of rows and walks it tile by
/// tile, running the kernel on one row segment of a tile at a time. A kernel whose lanes read a
/// transposed (strided) source then touches one tile of the source at a time instead of one
/// cache line per lane.
///
/// # Safety
/// As [`launch`]; also `can_tile(n, cols)`.
pub unsafe fn launch_tiled(kernel: &dyn CompiledKernel, args: &LaunchArgs, n: usize, cols: usize) {
    debug_assert!(can_tile(n, cols));
    let rows = n / cols;
    let th = band_rows(rows);
    let band = |b: usize| {
        for tc in (0..cols).step_by(TILE_LANES) {
            let w = TILE_LANES.min(cols - tc);
            for r in b * th..((b + 1) * th).min(rows) {
                let s = r * cols + tc;
                // SAFETY: forwarded to the caller; segments are disjoint and a whole number of
                // vectors long (cols % 4 == 0, TILE_LANES % 4 == 0).
                unsafe { kernel.run(args, s as u64, (s + w) as u64) };
            }
        }
    };
    let bands = rows.div_ceil(th);
    pool().install(|| (0..bands).into_par_iter().for_each(band));
}

/// Lanes a stencil launch runs straight into its outputs at a time: a multiple of the widest step
/// of a kernel that may write past a range's end (Cranelift's, 16 lanes at most), so a run of this
/// many lanes writes nothing past its end (LLVM's kernels, up to 64 lanes wide, never do).
const EXACT_STEP: usize = 16;

/// Border pieces shorter than this run the general kernel's short-run variant
/// ([`CompiledKernel::short_runs`]); longer ones (a grid's first and last rows) its full width.
const SHORT_PIECE: usize = 64;

/// Run `kernel` over exactly `[s, e)`: whole steps of [`EXACT_STEP`] lanes straight into the
/// outputs (in parallel blocks when long), the remainder in place for a kernel that
/// [`CompiledKernel::writes_exactly`], else into stack scratch that is then copied out, so that
/// not one lane outside the range is written (vector code otherwise writes whole vectors past the
/// end of a range). `outputs`: (parameter, element bytes) of each output.
///
/// # Safety
/// As [`launch`] for the lanes `[s, e)`; `args.ptrs` has one entry per parameter of the kernel and
/// every index in `outputs` is below that count.
unsafe fn run_exact(
    kernel: &dyn CompiledKernel,
    args: &LaunchArgs,
    n_params: usize,
    outputs: &[(usize, usize)],
    s: usize,
    e: usize,
) {
    let bulk = (e - s) / EXACT_STEP * EXACT_STEP;
    if bulk >= 2 * DEFAULT_BLOCK {
        let blocks = bulk.div_ceil(DEFAULT_BLOCK);
        // SAFETY: forwarded; the blocks are disjoint and whole steps long (DEFAULT_BLOCK is a
        // multiple of EXACT_STEP), so none writes into another.
        pool().install(|| {
            (0..blocks).into_par_iter().for_each(|b| unsafe {
                let bs = s + b * DEFAULT_BLOCK;
                kernel.run(args, bs as u64, (bs + DEFAULT_BLOCK).min(s + bulk) as u64)
            })
        });
    } else if bulk > 0 {
        // SAFETY: forwarded; a whole number of steps writes exactly [s, s + bulk).
        unsafe { kernel.run(args, s as u64, (s + bulk) as u64) };
    }
    let base = s + bulk;
    if base == e {
        return;
    }
    if kernel.writes_exactly() {
        // SAFETY: forwarded; this kernel writes exactly [base, e).
        unsafe { kernel.run(args, base as u64, e as u64) };
        return;
    }
    // 64 × 8 bytes per output: the remainder (< 16 lanes) plus the widest vector written past it
    const SCRATCH: usize = 64;
    let mut scratch_stack = [[0u64; SCRATCH]; 4];
    let mut scratch_heap = Vec::new();
    let scratch: &mut [[u64; SCRATCH]] = if outputs.len() <= 4 {
        &mut scratch_stack[..outputs.len()]
    } else {
        scratch_heap.resize(outputs.len(), [0u64; SCRATCH]);
        &mut scratch_heap
    };
    // SAFETY: the caller guarantees `n_params` pointers behind `args.ptrs`.
    let given = unsafe { std::slice::from_raw_parts(args.ptrs, n_params) };
    let mut ptrs_stack = [std::ptr::null_mut::<u8>(); 32];
    let mut ptrs_heap = Vec::new();
    let ptrs: &mut [*mut u8] = if n_params <= 32 {
        ptrs_stack[..n_params].copy_from_slice(given);
        &mut ptrs_stack[..n_params]
    } else {
        ptrs_heap.extend_from_slice(given);
        &mut ptrs_heap
    };
    for (k, &(p, bytes)) in outputs.iter().enumerate() {
        // lane `base` of the output lands at scratch[k][0]
        ptrs[p] = scratch[k]
            .as_mut_ptr()
            .cast::<u8>()
            .wrapping_sub(base * bytes);
    }
    let shifted = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: args.lens,
        status: args.status,
    };
    // SAFETY: inputs are the caller's; each output now points so that lanes [base, e) — fewer than
    // EXACT_STEP — and a vector past them land inside its 512-byte scratch.
    unsafe { kernel.run(&shifted, base as u64, e as u64) };
    for (k, &(p, bytes)) in outputs.iter().enumerate() {
        // SAFETY: the output buffer holds lane e − 1 (the caller's range is inside it); the
        // scratch holds (e − base) · bytes ≤ 15 · 8 initialised bytes; they do not overlap.
        unsafe {
            let dst = (*args.ptrs.add(p)).add(base * bytes);
            std::ptr::copy_nonoverlapping(
                scratch[k].as_ptr().cast::<u8>(),
                dst,
                (e - base) * bytes,
            );
        }
    }
}

/// Run a stencil group (see `stencil`): the interior kernel over the plan's interior rows, the
/// general kernel over the border lanes between them. The lanes are cut into chunks of whole
/// pieces (an interior row, or the border between two rows), one task each. A task runs its pieces
/// in increasing lane order, each straight into the outputs: vector code may write a little past a
/// piece's end, but those lanes belong to later pieces of the same task, which rewrite them. Only a
/// task's last pieces (those within [`EXACT_STEP`] lanes of its end) run exactly ([`run_exact`]),
/// so tasks never write the same lane. With `through_gaps` (an interior kernel without side
/// effects or loops, so computing a few border lanes wrongly costs nothing), one interior run
/// covers consecutive rows and the short border gaps between them, which are then rewritten
/// exactly: one call per task instead of one per row.
///
/// # Safety
/// As [`launch`] for both kernels: `iargs` must be valid for every interior lane (its shifted
/// inputs read inside their buffers there), `gargs` for every lane; `outputs_*` as in
/// [`run_exact`] for each kernel (the kernels write the same output buffers).
pub unsafe fn launch_split(
    interior: (&dyn CompiledKernel, &LaunchArgs, usize),
    general: (&dyn CompiledKernel, &LaunchArgs, usize),
    outputs_interior: &[(usize, usize)],
    outputs_general: &[(usize, usize)],
    plan: &crate::stencil::SplitPlan,
    through_gaps: bool,
    min_chunk: usize,
) {
    if plan.size() == 0 {
        return;
    }
    let layout = split_layout(plan, through_gaps, min_chunk);
    // border pieces of a few lanes (the gaps between rows) run the general kernel's narrow
    // variant where the backend made one: a whole wide vector per gap wastes most of its lanes
    let short = general.0.short_runs().unwrap_or(general.0);
    let strided = general.0.strided_runs();
    let run_chunk = |c: &Vec<Call>| {
        for call in c {
            let (k, args, n_params, outs) = match call.kernel {
                Which::Interior => (interior.0, interior.1, interior.2, outputs_interior),
                Which::General => (general.0, general.1, general.2, outputs_general),
                Which::Short => (short, general.1, general.2, outputs_general),
                Which::Gaps { stride, count } => {
                    // SAFETY: as below; the gaps' lanes are border lanes of this task.
                    unsafe {
                        run_gaps(
                            general,
                            short,
                            strided,
                            outputs_general,
                            call,
                            stride,
                            count,
                        )
                    };
                    continue;
                }
            };
            // SAFETY: the caller's guarantees (a gap's lanes lie between interior lanes, where
            // the interior kernel's reads are inside its buffers); what a direct run writes past
            // its end lies before its task's end and is rewritten by that task's later calls
            // (see `split_layout`).
            unsafe {
                if call.exact {
                    run_exact(k, args, n_params, outs, call.s, call.e);
                } else {
                    k.run(args, call.s as u64, call.e as u64);
                }
            }
        }
    };
    if layout.len() == 1 {
        run_chunk(&layout[0]);
    } else {
        pool().install(|| layout.par_iter().for_each(run_chunk));
    }
}

/// Which kernel of a split launch a [`Call`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Interior,
    General,
    /// The general kernel's narrow variant (or the general kernel where there is none).
    Short,
    /// `count` gaps of the same length `stride` lanes apart, the first `[s, e)`: the general
    /// kernel on strided lanes, one launch for them all (or the narrow variant gap by gap).
    Gaps {
        stride: usize,
        count: usize,
    },
}

/// Rewrite a [`Which::Gaps`] call's gaps exactly with the general kernel.
///
/// # Safety
/// As [`launch_split`] for the general kernel over the gaps' lanes.
unsafe fn run_gaps(
    general: (&dyn CompiledKernel, &LaunchArgs, usize),
    short: &dyn CompiledKernel,
    strided: Option<&dyn CompiledKernel>,
    outputs: &[(usize, usize)],
    call: &Call,
    stride: usize,
    count: usize,
) {
    let (_, args, n_params) = general;
    let Some(k) = strided else {
        for g in 0..count {
            let at = g * stride;
            // SAFETY: forwarded.
            unsafe { run_exact(short, args, n_params, outputs, call.s + at, call.e + at) };
        }
        return;
    };
    // the strided kernel's parameters: the general kernel's, then `stride`, `base` and `width`
    // (size 1): one launch covers every gap, lane c at gap c / width, column c % width
    // SAFETY: the caller guarantees `n_params` pointers and lengths behind `args`.
    let (given_ptrs, given_lens) = unsafe {
        (
            std::slice::from_raw_parts(args.ptrs, n_params),
            std::slice::from_raw_parts(args.lens, n_params),
        )
    };
    let map: [i64; 3] = [stride as i64, call.s as i64, (call.e - call.s) as i64];
    // (one allocation per group of gaps, a task's whole border between its first and last row)
    let mut ptrs: Vec<*mut u8> = given_ptrs.to_vec();
    ptrs.extend(map.iter().map(|v| v as *const i64 as *mut u8));
    let mut lens: Vec<u64> = given_lens.to_vec();
    lens.extend([1, 1, 1]);
    let moved = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: args.status,
    };
    // SAFETY: the general kernel's arguments plus three live size-1 i64 buffers; lanes
    // `g · stride + call.s + j` for g < count, j < width are the gaps' lanes, inside every
    // buffer, and the strided kernel writes nothing else (its stores are scatters to those lanes).
    unsafe { k.run(&moved, 0, (count * (call.e - call.s)) as u64) };
}

/// One kernel call of a split launch's task: lanes `[s, e)`, exactly (nothing written past `e`)
/// or straight into the outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    kernel: Which,
    s: usize,
    e: usize,
    exact: bool,
}

/// The tasks of a split launch and the calls each makes, in order: a function of the plan, the
/// pool's size and the launch's options only, so it is worked out once and kept (a stencil
/// program launches the same plan at every step, and a narrow grid has thousands of rows).
fn split_layout(
    plan: &crate::stencil::SplitPlan,
    through_gaps: bool,
    min_chunk: usize,
) -> std::sync::Arc<Vec<Vec<Call>>> {
    type Key = (crate::stencil::SplitPlan, bool, usize, usize);
    type Kept = Vec<(Key, std::sync::Arc<Vec<Vec<Call>>>)>;
    /// The last few layouts this thread used, the latest last.
    const KEEP: usize = 8;
    thread_local! {
        static LAYOUTS: std::cell::RefCell<Kept> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let threads = threads();
    LAYOUTS.with(|l| {
        let mut l = l.borrow_mut();
        let found = l.iter().position(|(k, _)| {
            k.0 == *plan && k.1 == through_gaps && k.2 == min_chunk && k.3 == threads
        });
        let hit = match found {
            Some(i) => l.remove(i),
            None => {
                let made = std::sync::Arc::new(make_split_layout(plan, through_gaps, min_chunk));
                ((plan.clone(), through_gaps, min_chunk, threads), made)
            }
        };
        let layout = hit.1.clone();
        if l.len() == KEEP {
            l.remove(0);
        }
        l.push(hit);
        layout
    })
}

/// [`split_layout`], worked out. The lanes are cut into chunks of whole pieces (an interior row,
/// or the border between two rows), one task each; a task runs its pieces in increasing lane
/// order, straight into the outputs, except those within [`EXACT_STEP`] lanes of its end, which
/// run exactly.
fn make_split_layout(
    plan: &crate::stencil::SplitPlan,
    through_gaps: bool,
    min_chunk: usize,
) -> Vec<Vec<Call>> {
    let n = plan.size();
    // pieces in lane order: (start, end, interior?); rows that touch merge into one piece
    let mut pieces: Vec<(usize, usize, bool)> = Vec::new();
    let mut at = 0usize;
    plan.for_each_interior_segment(|s, len| {
        if s > at {
            pieces.push((at, s, false));
        }
        pieces.push((s, s + len, true));
        at = s + len;
    });
    if at < n {
        pieces.push((at, n, false));
    }
    // chunks of about `target` lanes (at least the kernel's block); a longer piece is cut
    let target = (n.div_ceil(threads() * 16))
        .clamp(min_chunk.clamp(EXACT_STEP, DEFAULT_BLOCK), 1 << 20)
        .next_multiple_of(EXACT_STEP);
    let mut chunks: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new()];
    let mut lanes = 0usize;
    for (mut s, e, inner) in pieces {
        while s < e {
            let room = target.saturating_sub(lanes).max(EXACT_STEP);
            let cut = if e - s > room { s + room } else { e };
            chunks.last_mut().expect("one chunk").push((s, cut, inner));
            lanes += cut - s;
            s = cut;
            if lanes >= target {
                chunks.push(Vec::new());
                lanes = 0;
            }
        }
    }
    chunks
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| chunk_calls(c, through_gaps))
        .collect()
}

/// The calls that rewrite `gaps` (in lane order): runs of gaps of one length at one spacing
/// (every row's gap in a 2-d grid) become one [`Which::Gaps`] call, a lone gap a narrow call.
fn gap_calls(gaps: &[(usize, usize)], calls: &mut Vec<Call>) {
    let mut i = 0;
    while i < gaps.len() {
        let (s, e) = gaps[i];
        let mut count = 1;
        let stride = gaps.get(i + 1).map_or(0, |g| g.0 - s);
        while i + count < gaps.len() {
            let (gs, ge) = gaps[i + count];
            if gs - gaps[i + count - 1].0 != stride || ge - gs != e - s {
                break;
            }
            count += 1;
        }
        let kernel = if count > 1 {
            Which::Gaps { stride, count }
        } else {
            Which::Short
        };
        calls.push(Call {
            kernel,
            s,
            e,
            exact: true,
        });
        i += count;
    }
}

/// The calls of one chunk of pieces (see [`make_split_layout`]).
fn chunk_calls(c: &[(usize, usize, bool)], through_gaps: bool) -> Vec<Call> {
    let chunk_end = c.last().map_or(0, |p| p.1);
    let mut calls = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let (s, mut e, inner) = c[i];
        // with `through_gaps`, one interior run spans the next rows and the short border
        // gaps between them (what it writes there is rewritten exactly below)
        let mut j = i + 1;
        if inner && through_gaps {
            while j + 1 < c.len() && !c[j].2 && c[j].1 - c[j].0 < EXACT_STEP && c[j + 1].2 {
                e = c[j + 1].1;
                j += 2;
            }
        }
        let kernel = if inner {
            Which::Interior
        } else if e - s < SHORT_PIECE {
            Which::Short
        } else {
            Which::General
        };
        // start whole runs at a 16-lane boundary (64-byte aligned outputs)
        let mut s = s;
        let al = s.next_multiple_of(EXACT_STEP);
        if inner && al > s && al + 4 * EXACT_STEP < e {
            calls.push(Call {
                kernel,
                s,
                e: al,
                exact: true,
            });
            s = al;
        }
        // (what a direct run writes past `e` lies before `chunk_end`: later calls rewrite it)
        let exact = e + EXACT_STEP > chunk_end;
        calls.push(Call {
            kernel,
            s,
            e,
            exact,
        });
        let gaps: Vec<(usize, usize)> = c[i + 1..j].iter().step_by(2).map(|g| (g.0, g.1)).collect();
        gap_calls(&gaps, &mut calls);
        i = j;
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stencil::SplitPlan;

    /// Whether `lane` of `plan`'s domain is interior.
    fn is_interior(plan: &SplitPlan, lane: usize) -> bool {
        let mut rest = lane;
        let mut inside = true;
        for d in (0..plan.shape.len()).rev() {
            let i = rest % plan.shape[d];
            rest /= plan.shape[d];
            inside &= plan.start[d] <= i && i < plan.end[d];
        }
        inside
    }

    /// Replays a layout's calls, a direct call writing as far as a kernel may write past its end
    /// (one step less than EXACT_STEP), and checks the launch's contract: the tasks cover the
    /// lanes once each, none writes outside its lanes, and every lane is last written by the
    /// kernel it belongs to (interior lanes by the interior kernel, border lanes by the general
    /// kernel or its narrow variant, which compute the same).
    fn check(plan: &SplitPlan, through_gaps: bool, min_chunk: usize) {
        let n = plan.size();
        let layout = split_layout(plan, through_gaps, min_chunk);
        let mut at = 0;
        for task in layout.iter() {
            let lo = task.iter().map(|c| c.s).min().expect("a task has calls");
            let hi = task.iter().map(|c| c.e).max().expect("a task has calls");
            assert_eq!(lo, at, "{plan:?}: tasks must follow each other");
            let mut last: Vec<Option<Which>> = vec![None; hi - lo];
            for c in task {
                assert!(c.s < c.e, "{plan:?}: empty call {c:?}");
                let reach = if c.exact { c.e } else { c.e + EXACT_STEP - 1 };
                let (stride, count) = match c.kernel {
                    Which::Gaps { stride, count } => (stride, count),
                    _ => (0, 1),
                };
                assert!(count == 1 || stride >= c.e - c.s, "{plan:?}: {c:?}");
                let end = reach + (count - 1) * stride;
                assert!(end <= hi, "{plan:?}: {c:?} writes past its task's end {hi}");
                for g in 0..count {
                    for l in c.s + g * stride..reach + g * stride {
                        last[l - lo] = Some(c.kernel);
                    }
                }
            }
            for (l, w) in last.iter().enumerate() {
                let lane = lo + l;
                let want_interior = is_interior(plan, lane);
                match w {
                    Some(Which::Interior) => assert!(want_interior, "{plan:?}: lane {lane}"),
                    Some(_) => assert!(!want_interior, "{plan:?}: lane {lane}"),
                    None => panic!("{plan:?}: lane {lane} never written"),
                }
            }
            at = hi;
        }
        assert_eq!(at, n, "{plan:?}: the tasks must cover every lane");
    }

    fn plan(shape: &[usize], lo: &[usize], hi: &[usize]) -> SplitPlan {
        SplitPlan {
            shape: shape.to_vec(),
            start: lo.to_vec(),
            end: shape.iter().zip(hi).map(|(s, h)| s - h).collect(),
        }
    }

    #[test]
    fn split_layouts_write_every_lane_with_its_own_kernel() {
        for through_gaps in [false, true] {
            for min_chunk in [16, 1024, 4096] {
                check(
                    &plan(&[1024, 1024], &[1, 1], &[1, 1]),
                    through_gaps,
                    min_chunk,
                );
                check(
                    &plan(&[16384, 64], &[1, 1], &[1, 1]),
                    through_gaps,
                    min_chunk,
                );
                check(&plan(&[40, 30], &[2, 3], &[1, 2]), through_gaps, min_chunk);
                check(
                    &plan(&[6, 5, 40], &[1, 1, 1], &[1, 1, 1]),
                    through_gaps,
                    min_chunk,
                );
                check(&plan(&[3000], &[2], &[5]), through_gaps, min_chunk);
                check(&plan(&[33, 17], &[0, 0], &[0, 0]), through_gaps, min_chunk);
            }
        }
    }

    #[test]
    fn split_layouts_are_worked_out_once_per_plan() {
        let p = plan(&[64, 48], &[1, 2], &[1, 2]);
        let a = split_layout(&p, true, 1024);
        assert!(std::sync::Arc::ptr_eq(&a, &split_layout(&p, true, 1024)));
        // another option, or another plan, is another layout
        assert!(!std::sync::Arc::ptr_eq(&a, &split_layout(&p, false, 1024)));
        let q = plan(&[64, 48], &[1, 1], &[1, 1]);
        assert!(!std::sync::Arc::ptr_eq(&a, &split_layout(&q, true, 1024)));
    }
}
