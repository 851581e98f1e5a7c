//! Giving back the pages of our own code that start-up mapped, once the controllers run.
//!
//! The kernel maps the pages around each one a process runs (fault-around, 64 KiB by default),
//! and start-up (flags, configuration, TLS, the first lists) runs code spread over most of the
//! binary: a replica then keeps about 15 MiB of its code mapped, whatever its share, while the
//! code it runs once its caches are synced touches about 3 MiB (measured with `clear_refs` on
//! 2026-11-30, docs/benchmark.md#what-every-replica-pays). With sharding that fixed part is
//! paid by every replica, so it decides how far a replica's memory falls with its share.
//!
//! `MADV_DONTNEED` on a private mapping of a file drops this process's mapping of the pages;
//! the next use maps them again from the page cache, as at start-up. It is safe only where the
//! pages are exactly the file's: mappings that are not writable and hold no page of their own,
//! resident or swapped out (`Anonymous: 0` and `Swap: 0` in smaps). The relocated read-only
//! data (RELRO) holds such pages and is left alone; so is every other file.
//!
//! Unmapping alone does not last: converging runs code all over the binary again, and each
//! fault maps every page of its 64 KiB window that is in the page cache, which after start-up
//! is nearly the whole file. So the pages of the executable that no process maps any more are
//! also dropped from the page cache (`POSIX_FADV_DONTNEED`, which leaves mapped pages alone,
//! another process's included); what is needed again is read from the file. From then on the
//! cache holds the pages some process ran since and what the kernel read ahead of them, and a
//! fault maps only those around it.
//!
//! That still maps up to 16 pages for each one run, and the code a converging replica runs is
//! spread thin over the binary: converging its half of 100,000 Foos, a replica ran 2.9 MiB of code
//! in a minute and had 15.3 MiB of it mapped (2026-11-30, before the page cache was dropped; 12 to
//! 14 MiB after). Fault-around stops at the edge of a mapping, so the released mappings are then
//! split into mappings of one page each: every other page is marked `MADV_RANDOM` and the rest
//! `MADV_NORMAL`, and the kernel cannot merge neighbours whose flags differ. A fault then maps the
//! one page it needs. The flags themselves only steer how far a fault in that page reads ahead into
//! the page cache, which no longer decides what is mapped. Each mapping costs the kernel about 200
//! bytes of its own memory (a `vm_area_struct` and its share of the maple tree, charged to the
//! process's cgroup): about 1.2 MiB for the image's binary, computed from its segments' sizes and
//! not measured, against what it keeps unmapped. The split takes at most a quarter of the process's
//! limit on mappings (`vm.max_map_count`), in pieces of more pages if it must.
//!
//! What each step saves is measured in docs/benchmark.md#what-every-replica-pays.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Once;

use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
use nix::sys::mman::{MmapAdvise, madvise};
use procfs::process::{MMPermissions, MMapPath, MemoryMap, Process};

/// Gives back the code pages once per process, the first time every controller is synced
/// (later syncs, after a restart of the watches, find the pages a running controller needs).
pub fn release_once() {
    static RELEASED: Once = Once::new();
    RELEASED.call_once(|| match release() {
        Ok(bytes) => tracing::info!(
            mib = format_args!("{:.1}", bytes as f64 / (1024.0 * 1024.0)),
            "gave back the pages of start-up code; the code in use maps its own again"
        ),
        Err(error) => tracing::debug!(%error, "could not give back the pages of start-up code"),
    });
}

/// Drops this process's mappings of its own executable's unmodified pages, and the executable's
/// pages that no process maps from the page cache; returns how many bytes were resident in the
/// mappings.
fn release() -> Result<u64, std::io::Error> {
    let me = Process::myself().map_err(std::io::Error::other)?;
    let exe = me.exe().map_err(std::io::Error::other)?;
    let inode = std::fs::metadata("/proc/self/exe")?.ino();
    let maps = me.smaps().map_err(std::io::Error::other)?;
    let mappings = maps.len() as u64;
    let chosen = releasable(maps, &exe, inode);
    let page = procfs::page_size();
    let pages = chosen
        .iter()
        .map(|map| (map.address.1 - map.address.0) / page)
        .sum();
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        // The kernel's default, if the limit cannot be read.
        .unwrap_or(65_530);
    let piece = pages_per_piece(pages, mappings, limit);
    let mut released = 0;
    for map in chosen {
        let (start, end) = map.address;
        let Some(address) = NonNull::new(start as *mut std::ffi::c_void) else {
            continue;
        };
        // SAFETY: the range is a whole mapping of our executable that is neither writable nor
        // holds a page of its own, so every page is the file's and comes back from it unchanged;
        // no Rust object lives in it.
        unsafe { madvise(address, (end - start) as usize, MmapAdvise::MADV_DONTNEED) }
            .map_err(std::io::Error::from)?;
        // SAFETY: as above; these advices only change how much a fault reads from the file.
        unsafe { split(address, (end - start) as usize, (piece * page) as usize) }?;
        released += resident(&map);
    }
    // The same file as the mappings: /proc/self/exe opens the executable even if its path has
    // been replaced since.
    drop_unmapped_from_cache(&std::fs::File::open("/proc/self/exe")?)?;
    Ok(released)
}

/// How many pages each piece of the split holds: one, unless `pages` pieces would take more than
/// a quarter of the process's limit on mappings (`limit`) beside the `mappings` it has.
fn pages_per_piece(pages: u64, mappings: u64, limit: u64) -> u64 {
    let room = (limit / 4).saturating_sub(mappings).max(1);
    pages.div_ceil(room).max(1)
}

/// Splits the mapping at `address` (`len` bytes) into mappings of `piece` bytes, so that a fault
/// in one maps no page of the next: alternate pieces are marked `MADV_RANDOM` and
/// `MADV_NORMAL`, which the kernel does not merge. Stops quietly where the kernel refuses a
/// split (out of mappings): what is split by then stays split, the rest as it was.
///
/// # Safety
/// The range must be one private, read-only mapping of a file (these advices change only how
/// far a fault reads ahead).
unsafe fn split(address: NonNull<std::ffi::c_void>, len: usize, piece: usize) -> Result<(), std::io::Error> {
    for (index, offset) in (0..len).step_by(piece).enumerate() {
        let advice = if index % 2 == 0 {
            MmapAdvise::MADV_RANDOM
        } else {
            MmapAdvise::MADV_NORMAL
        };
        // SAFETY: inside the mapping, as the caller promises.
        let start = unsafe { address.byte_add(offset) };
        match unsafe { madvise(start, piece.min(len - offset), advice) } {
            Ok(()) => {}
            Err(nix::errno::Errno::ENOMEM) => return Ok(()),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Drops the clean pages of `file` that no process maps from the page cache; what a process
/// needs later is read again from the file.
fn drop_unmapped_from_cache(file: &std::fs::File) -> Result<(), std::io::Error> {
    posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).map_err(std::io::Error::from)
}

/// The mappings of the executable (`exe`, `inode`) whose pages are exactly the file's and that
/// have some resident.
fn releasable(maps: impl IntoIterator<Item = MemoryMap>, exe: &Path, inode: u64) -> Vec<MemoryMap> {
    maps.into_iter()
        .filter(|map| matches!(&map.pathname, MMapPath::Path(path) if path == exe) && map.inode == inode)
        .filter(|map| {
            map.perms.contains(MMPermissions::PRIVATE | MMPermissions::READ)
                && !map.perms.contains(MMPermissions::WRITE)
        })
        // Without smaps' figures there is no telling whether a page was written: keep it.
        .filter(|map| {
            let figure = |name: &str| map.extension.map.get(name).copied();
            figure("Anonymous") == Some(0) && figure("Swap") == Some(0)
        })
        .filter(|map| resident(map) > 0)
        .collect()
}

fn resident(map: &MemoryMap) -> u64 {
    map.extension.map.get("Rss").copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use procfs::FromBufRead;
    use procfs::process::MemoryMaps;

    /// Mappings shaped on those of a release build of sample-operator in smaps on 2026-11-30
    /// (its sizes; made-up addresses and path), shortened to the fields read, with kinds that
    /// must be kept: a swapped-out page, a replaced file, the C library's, the heap.
    const SMAPS: &str = "\
55d0a0000000-55d0a01c0000 r--p 00000000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                1792 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0a01c0000-55d0a1500000 r-xp 001c0000 fe:00 4242 /usr/local/bin/sample-operator
Rss:               15560 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0a1500000-55d0a1580000 r--p 01500000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                 500 kB
Anonymous:           500 kB
Swap:                  0 kB
55d0a1580000-55d0a1588000 rw-p 01580000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                  24 kB
Anonymous:            24 kB
Swap:                  0 kB
55d0a1588000-55d0a1590000 rw-p 01588000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0a1590000-55d0a15a0000 r--p 01590000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0a15a0000-55d0a15b0000 r--p 015a0000 fe:00 4242 /usr/local/bin/sample-operator
Rss:                   8 kB
Anonymous:             0 kB
Swap:                 56 kB
55d0a15b0000-55d0a15c0000 r--p 015b0000 fe:00 999 /usr/local/bin/sample-operator
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
7f4830ed4000-7f483102a000 r-xp 00026000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1072 kB
Anonymous:             0 kB
Swap:                  0 kB
7f4831100000-7f4831200000 rw-p 00000000 00:00 0                  
Rss:                1024 kB
Anonymous:          1024 kB
Swap:                  0 kB
";

    #[test]
    fn only_the_unmodified_resident_mappings_of_the_executable_are_released() {
        let maps = MemoryMaps::from_buf_read(SMAPS.as_bytes()).unwrap();
        let chosen: Vec<_> = releasable(maps, Path::new("/usr/local/bin/sample-operator"), 4242)
            .into_iter()
            .map(|map| map.address.0)
            .collect();
        // The read-only data and the code; not the relocated data (pages of its own, resident
        // or swapped out), the writable data (even pages not written yet: a thread could write
        // them as they go), a mapping with nothing resident, another file of the same name
        // (replaced since), the C library or the heap.
        assert_eq!(chosen, [0x55d0a0000000, 0x55d0a01c0000]);
    }

    #[test]
    fn without_smaps_figures_nothing_is_released() {
        let maps = procfs::process::MemoryMaps::from_buf_read(
            "55d0a01c0000-55d0a1500000 r-xp 001c0000 fe:00 4242 /usr/local/bin/sample-operator\n".as_bytes(),
        )
        .unwrap();
        assert!(releasable(maps, Path::new("/usr/local/bin/sample-operator"), 4242).is_empty());
    }

    /// On this very test process: its code's pages go, and it runs on. (nextest runs each test
    /// in a process of its own.)
    #[test]
    fn released_code_pages_are_unmapped_and_the_process_runs_on() {
        let me = Process::myself().unwrap();
        let exe = me.exe().unwrap();
        let code = me
            .maps()
            .unwrap()
            .into_iter()
            .find(|map| {
                matches!(&map.pathname, MMapPath::Path(path) if *path == exe)
                    && map.perms.contains(MMPermissions::EXECUTE)
            })
            .expect("the test binary's code")
            .address;
        let before = present(code.0, code.1 - code.0);
        let released = release().unwrap();
        let after = present(code.0, code.1 - code.0);
        assert!(released > 0, "nothing was released");
        // Pages mapped before and not after: without the unmapping there are none, as a mapped
        // page stays mapped. Not the totals: what runs in between maps pages again around each
        // fault, and when another process has just read the file whole (as the test below does,
        // in a process of its own beside this one) a fault can map a large folio whole, so the
        // total after exceeded the total before in 7 runs in 20 with that test beside it (on
        // 2026-12-03, a debug build; once in that day's CI). What went stayed 43-50% of what was
        // mapped, alone or beside it (40 runs): an eighth leaves room for a busier machine.
        let before_count = before.iter().filter(|&&mapped| mapped).count();
        let gone = before
            .iter()
            .zip(&after)
            .filter(|&(&was, &is)| was && !is)
            .count();
        assert!(
            gone * 8 >= before_count,
            "the code stayed mapped: {gone} of the {before_count} pages mapped before went"
        );
        // And the process runs on, its code mapped again as it goes: the test returns.
    }

    #[test]
    fn the_split_takes_one_page_a_piece_within_a_quarter_of_the_mapping_limit() {
        // The image's binary: about 6,100 pages of code and read-only data.
        assert_eq!(pages_per_piece(6_200, 40, 65_530), 1);
        assert_eq!(pages_per_piece(6_200, 40, 16_000), 2);
        // A limit already used up leaves one mapping: the whole range stays one piece.
        assert_eq!(pages_per_piece(6_200, 70_000, 65_530), 6_200);
        assert_eq!(pages_per_piece(0, 40, 65_530), 1);
    }

    /// After the split a fault maps the page it needs and no other; without it the kernel maps
    /// the cached pages around each fault (fault-around, 64 KiB by default).
    #[test]
    fn a_fault_in_a_split_mapping_maps_only_its_own_page() {
        const PAGES: usize = 1024;
        const STRIDE: usize = 16;
        let page = procfs::page_size() as usize;
        let file = cached_file("split", PAGES);
        let read_every_stride_th = |split_first: bool| -> usize {
            let map = map_private(&file, PAGES * page);
            if split_first {
                // SAFETY: the whole private read-only mapping just made.
                unsafe { split(NonNull::new(map).unwrap(), PAGES * page, page) }.unwrap();
            }
            for index in (0..PAGES).step_by(STRIDE) {
                // SAFETY: inside the mapping, which is readable.
                assert_eq!(
                    unsafe { std::ptr::read_volatile(map.cast::<u8>().add(index * page)) },
                    7
                );
            }
            let mapped = present(map as u64, (PAGES * page) as u64)
                .iter()
                .filter(|&&p| p)
                .count();
            // SAFETY: the mapping made above, no longer read.
            unsafe { libc::munmap(map, PAGES * page) };
            mapped
        };
        let touched = PAGES / STRIDE;
        let whole = read_every_stride_th(false);
        assert!(
            whole > touched,
            "the kernel mapped no page around a fault: {whole} of {touched}"
        );
        assert_eq!(read_every_stride_th(true), touched, "pages mapped with the split");
    }

    /// Pages that no process maps leave the page cache and mapped ones stay. On a file only
    /// this test opens: the test binary itself is mapped by every test process running beside
    /// this one, so how much of it stays is theirs to decide (68% in the project CI's run of
    /// 2019c59, with 221 tests of this binary around it, where this test once asked for <50%).
    #[test]
    fn pages_that_nothing_maps_leave_the_page_cache_and_mapped_pages_stay() {
        const PAGES: usize = 4096;
        let page = procfs::page_size() as usize;
        let file = cached_file("cache", PAGES);
        let before = cached_pages(&file);
        assert!(
            before * 10 >= PAGES * 9,
            "the file was not read into the cache: {before} pages"
        );

        // A quarter of it mapped and read, as a process runs its code.
        let mapped = PAGES / 4;
        let map = map_private(&file, mapped * page);
        let sum: u64 = (0..mapped)
            // SAFETY: inside the mapping, which is readable.
            .map(|index| u64::from(unsafe { std::ptr::read_volatile(map.cast::<u8>().add(index * page)) }))
            .sum();
        assert_eq!(sum, 7 * mapped as u64);

        drop_unmapped_from_cache(&file).unwrap();
        let after = cached_pages(&file);
        // SAFETY: the mapping made above, no longer read.
        unsafe { libc::munmap(map, mapped * page) };
        // The mapped quarter stays whole; of the rest, at most what shares a large folio with a
        // mapped page, far less than a quarter of it.
        assert!(
            after >= mapped,
            "mapped pages left the cache: {after} of {mapped} stayed"
        );
        assert!(
            after < mapped + (PAGES - mapped) / 4,
            "the page cache kept pages nothing maps: {before} pages before, {after} after, {mapped} mapped"
        );
    }

    /// A file of `pages` pages of 7s, clean and read into the page cache, as an installed binary
    /// is once a process has started from it.
    fn cached_file(name: &str, pages: usize) -> std::fs::File {
        // Beside the test binary, on the disk the build writes to: on tmpfs the page cache is
        // the file's only copy and nothing leaves it.
        let path = std::env::current_exe()
            .unwrap()
            .with_file_name(format!("code-pages-{name}-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; pages * procfs::page_size() as usize]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // Unlinked at once: the open file keeps its pages, and a failing test leaves nothing.
        std::fs::remove_file(&path).unwrap();
        // Written pages stay dirty, and only clean ones can leave: as for an installed binary.
        file.sync_data().unwrap();
        std::io::copy(&mut &file, &mut std::io::sink()).unwrap();
        file
    }

    /// A fresh private read-only mapping of the first `len` bytes of `file`, as the loader maps
    /// code; the caller reads it and unmaps it.
    fn map_private(file: &std::fs::File, len: usize) -> *mut libc::c_void {
        // SAFETY: a new mapping that no Rust object overlaps.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(file),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        map
    }

    /// Which pages of the range at `start` (`len` bytes) are mapped in this process, from the
    /// page table (pagemap's "present" bit) rather than smaps, whose parsing would run, and so
    /// map, much code of its own.
    fn present(start: u64, len: u64) -> Vec<bool> {
        use std::os::unix::fs::FileExt;
        let page = procfs::page_size();
        let mut entries = vec![0u8; (len / page * 8) as usize];
        std::fs::File::open("/proc/self/pagemap")
            .unwrap()
            .read_exact_at(&mut entries, start / page * 8)
            .unwrap();
        entries
            .chunks_exact(8)
            .map(|entry| u64::from_le_bytes(entry.try_into().unwrap()) >> 63 == 1)
            .collect()
    }

    /// How many of `file`'s pages are in the page cache (mincore(2) on a mapping that touches
    /// none of them; as root or the file's owner, which the tests run as).
    fn cached_pages(file: &std::fs::File) -> usize {
        use std::os::fd::AsRawFd;
        let len = file.metadata().unwrap().len() as usize;
        let page = procfs::page_size() as usize;
        let mut resident = vec![0u8; len.div_ceil(page)];
        // SAFETY: a fresh read-only mapping of the whole file, only passed to mincore and
        // unmapped here; nothing reads through it.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
            let status = libc::mincore(map, len, resident.as_mut_ptr());
            let error = std::io::Error::last_os_error();
            libc::munmap(map, len);
            assert_eq!(status, 0, "mincore: {error}");
        }
        resident.iter().filter(|page| *page & 1 == 1).count()
    }
}
