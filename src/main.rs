// The allocator is chosen by the binary. jemalloc measured faster than the
// system allocator with a small RSS (BENCHMARKS.md); mimalloc is for
// comparison runs and wins when both features are on. jemalloc's options
// are compiled in from .cargo/config.toml.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    std::process::exit(mrguard::cli::run(mrguard::cli::parse()));
}
