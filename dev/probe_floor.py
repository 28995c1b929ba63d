"""Is lesson 08's dequantize floor the loop's or the DRAM's? (lessons/08_nf4/stream_probe.cu has the kernels.)

    python dev/probe_floor.py

Moves a 4-bit dequantize kernel's bytes for lesson 08's three shapes (per packed word: 4 bytes and 1/8 of an FP32
scale in, 16 bytes out), with no decoding, three ways: lesson 08's loop (`expand`, the floor in its table), the bulk
copy engine both ways (`expand_bulk`), and the writes alone in lesson 08's loop (`fill`). Each at a few grid sizes,
inputs rotated past L2, every mover checked byte for byte first; % = bytes moved / time against a copy measured in
the same run (torch copy_ of 512 MB, bytes read + written)."""
import torch

from harness import bench, build

SHAPES = [(4096, 4096), (14336, 4096), (8192, 8192)]  # N × K, lesson 08's


def main():
    mod = build.load_file(build.ROOT / "lessons" / "08_nf4" / "stream_probe.cu", solution=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    copy = 2 * a.numel() / bench.time_fn(lambda: b.copy_(a), [()], reps=50).median_us / 1e3
    del a, b
    print(f"copy, this run: {copy:,.0f} GB/s")
    movers = {"lesson 08's loop (the floor)": lambda q, s, o, w, g: mod.expand(q, s, o, w, g * sms),
              "bulk copy engine, 4 stages": lambda q, s, o, w, g: mod.expand_bulk(q, s, o, w, g * sms, 4),
              "bulk copy engine, 8 stages": lambda q, s, o, w, g: mod.expand_bulk(q, s, o, w, g * sms, 8)}
    grids = {"lesson 08's loop (the floor)": (8, 16), "bulk copy engine, 4 stages": (2, 4),
             "bulk copy engine, 8 stages": (1, 2)}  # blocks per SM (the bulk rings: 34 and 52 KB of shared memory)
    for N, K in SHAPES:
        words = N * K // 8
        assert words % 1024 == 0, "expand_bulk moves chunks of 1024 words"
        moved = words * 4 + words // 8 * 4 + words * 16
        sets = [(torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda").view(torch.uint8),
                 torch.rand(words // 8, device="cuda")) for _ in range(max(2, -(-150_000_000 // (words * 9 // 2))))]
        out = torch.empty(words * 16, dtype=torch.uint8, device="cuda")
        q, s = sets[0]
        want = torch.stack([q.view(torch.int32), s.view(torch.int32).repeat_interleave(8), q.view(torch.int32),
                            q.view(torch.int32)], 1).reshape(-1)
        print(f"\nN {N} K {K}: {moved / 1e6:.1f} MB moved ({100 * (words * 16) / moved:.0f}% of it written)")
        for name, fn in movers.items():
            out.fill_(0xFF)
            fn(q, s, out, words, 2)
            torch.cuda.synchronize()
            if not torch.equal(out.view(torch.int32), want):
                raise SystemExit(f"{name}: wrong bytes at N {N} K {K}")
            for g in grids[name]:
                t = bench.time_fn(lambda q, s: fn(q, s, out, words, g), sets, reps=60).median_us
                print(f"  {name:<30} {g:>2} blocks/SM {t:7.2f} µs {100 * moved / t / 1e3 / copy:5.1f}% of copy")
        for g in (8, 16):
            t = bench.time_fn(lambda: mod.fill(out, words, g * sms), [()], reps=60).median_us
            print(f"  {'writes alone (fill)':<30} {g:>2} blocks/SM {t:7.2f} µs {100 * words * 16 / t / 1e3 / copy:5.1f}% "
                  f"of copy (its {words * 16 / 1e6:.0f} MB)")
        del sets, out, want


if __name__ == "__main__":
    main()
