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

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Once;

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

/// Drops this process's mappings of its own executable's unmodified pages; returns how many
/// bytes were resident in them.
fn release() -> Result<u64, std::io::Error> {
    let me = Process::myself().map_err(std::io::Error::other)?;
    let exe = me.exe().map_err(std::io::Error::other)?;
    let inode = std::fs::metadata("/proc/self/exe")?.ino();
    let maps = me.smaps().map_err(std::io::Error::other)?;
    let mut released = 0;
    for map in releasable(maps, &exe, inode) {
        let (start, end) = map.address;
        let Some(address) = NonNull::new(start as *mut std::ffi::c_void) else {
            continue;
        };
        // SAFETY: the range is a whole mapping of our executable that is neither writable nor
        // holds a page of its own, so every page is the file's and comes back from it unchanged;
        // no Rust object lives in it.
        unsafe { madvise(address, (end - start) as usize, MmapAdvise::MADV_DONTNEED) }
            .map_err(std::io::Error::from)?;
        released += resident(&map);
    }
    Ok(released)
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
        // Counted from the page table (pagemap's "present" bit) rather than smaps, whose
        // parsing would run, and so map, much code of its own.
        let page = procfs::page_size();
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut entries = vec![0u8; ((code.1 - code.0) / page * 8) as usize];
        let mut mapped = || {
            use std::os::unix::fs::FileExt;
            pagemap.read_exact_at(&mut entries, code.0 / page * 8).unwrap();
            entries
                .chunks_exact(8)
                .filter(|entry| u64::from_le_bytes((*entry).try_into().unwrap()) >> 63 == 1)
                .count() as u64
                * page
        };
        let before = mapped();
        let released = release().unwrap();
        // What runs in between maps some pages again, far fewer than start-up and the test
        // harness had (3.6 MB before and 2.6 MB after in a debug build on 2026-11-30): without
        // the unmapping the count could only have grown.
        let after = mapped();
        assert!(released > 0, "nothing was released");
        assert!(
            after < before,
            "the code stayed mapped: {before} bytes before, {after} after"
        );
        // And the process runs on, its code mapped again as it goes: the test returns.
    }
}
