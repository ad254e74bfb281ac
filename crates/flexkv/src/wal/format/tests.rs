use super::*;

fn records(data: &[u8]) -> Vec<Found> {
    Reader::new(data).collect()
}

fn framed(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut len = 0;
    for p in payloads {
        len = frame(&mut out, len, p);
        assert_eq!(len as usize, out.len());
    }
    out
}

#[test]
fn records_of_every_size_round_trip_across_block_boundaries() {
    let sizes = [
        0,
        1,
        7,
        100,
        BLOCK - 16,
        BLOCK - 8,
        BLOCK,
        3 * BLOCK + 5,
        20,
    ];
    let payloads: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    let data = framed(&payloads);
    let got = records(&data);
    assert_eq!(got.len(), payloads.len());
    for (g, p) in got.iter().zip(&payloads) {
        match g {
            Found::Record { payload, .. } => assert_eq!(payload, p),
            bad => panic!("{bad:?}"),
        }
    }
    // Trailing zeros (a preallocated or zero-filled tail) are a clean end.
    let mut padded = data.clone();
    padded.resize(data.len() + 1000, 0);
    assert_eq!(records(&padded).len(), payloads.len());
}

#[test]
fn every_truncation_and_every_flipped_byte_is_caught() {
    let payloads = vec![vec![1u8; 50], vec![2u8; BLOCK + 100], vec![3u8; 10]];
    let data = framed(&payloads);
    for cut in 0..data.len() {
        let got = records(&data[..cut]);
        let whole = got
            .iter()
            .take_while(|f| matches!(f, Found::Record { .. }))
            .count();
        for (g, p) in got.iter().take(whole).zip(&payloads) {
            assert!(matches!(g, Found::Record { payload, .. } if payload == p));
        }
        assert!(
            got.len() <= whole + 1,
            "cut {cut}: reading went on after damage"
        );
    }
    for i in (0..data.len()).step_by(7) {
        let mut bad = data.clone();
        bad[i] ^= 0x40;
        let got = records(&bad);
        assert!(
            got.iter().any(|f| matches!(f, Found::Bad { .. })),
            "flip at {i} not caught"
        );
        for g in &got {
            if let Found::Record { payload, .. } = g {
                assert!(
                    payloads.contains(payload),
                    "flip at {i} produced a wrong record"
                );
            }
        }
    }
}

#[test]
fn a_reader_resynchronises_at_the_next_block_after_damage() {
    let payloads = vec![vec![1u8; 100], vec![2u8; 2 * BLOCK], vec![3u8; 10]];
    let mut data = framed(&payloads);
    data[FRAG_HEADER + 100 + 3] ^= 1; // inside the second record's first fragment header
    let got = records(&data);
    assert!(matches!(&got[0], Found::Record { payload, .. } if payload == &payloads[0]));
    assert!(
        matches!(got[1], Found::Bad { offset: 108, .. }),
        "{:?}",
        got[1]
    );
    assert!(
        got.iter()
            .any(|f| matches!(f, Found::Record { payload, .. } if payload == &payloads[2])),
        "the record after the damage was not found"
    );
}

#[test]
fn a_group_round_trips_and_truncated_groups_are_refused() {
    let ptr = Pointer {
        segment: 2,
        offset: 300,
        len: 5000,
        check: 9,
    };
    let batches = [
        vec![
            OpRef::Put {
                ks: 0,
                key: b"a",
                value: b"",
            },
            OpRef::Delete { ks: 300, key: b"b" },
        ],
        vec![OpRef::PutSeparated {
            ks: 1,
            key: &[0xff; 200],
            ptr,
        }],
    ];
    let mut out = Vec::new();
    encode_group_header(&mut out, 7, 10, 2);
    for b in &batches {
        encode_batch(&mut out, b.iter().copied());
    }
    let g = decode_group(&out).unwrap();
    assert_eq!((g.durable, g.first, g.last()), (7, 10, 11));
    assert_eq!(
        g.batches,
        vec![
            vec![
                Op::Put {
                    ks: 0,
                    key: b"a".to_vec(),
                    value: vec![]
                },
                Op::Delete {
                    ks: 300,
                    key: b"b".to_vec()
                }
            ],
            vec![Op::PutSeparated {
                ks: 1,
                key: vec![0xff; 200],
                ptr
            }]
        ]
    );
    for cut in 0..out.len() {
        assert!(decode_group(&out[..cut]).is_err(), "cut at {cut} accepted");
    }
    let mut extra = out.clone();
    extra.push(0);
    assert!(decode_group(&extra).is_err());
}

#[test]
fn segment_headers_round_trip() {
    let h = segment_header(1, 42);
    assert_eq!(parse_segment_header(&h), Some((1, 42)));
    assert_eq!(parse_segment_header(&h[..16]), None);
    let mut bad = h.clone();
    bad[3] ^= 1;
    assert_eq!(parse_segment_header(&bad), None);
}

#[test]
fn varints_round_trip() {
    for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        let mut c = Cursor { b: &out, at: 0 };
        assert_eq!(c.varint(), Ok(v));
        assert_eq!(c.at, out.len());
    }
}

mod arbitrary_bytes {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Decoders meet garbage without panicking: the reader reports damage or a clean
        /// end, and a group decoder returns an error or a group.
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            for found in Reader::new(&data) {
                if let Found::Record { payload, .. } = found {
                    let _ = decode_group(&payload);
                }
            }
            let _ = decode_group(&data);
            let _ = parse_segment_header(&data);
        }

        /// Mutations of a valid segment: every record read back is one that was written.
        #[test]
        fn mutated_segments_never_yield_foreign_records(
            flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..6),
            cut in any::<usize>(),
        ) {
            let payloads: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 700 * i + 3]).collect();
            let mut data = Vec::new();
            let mut len = 0;
            for p in &payloads {
                len = frame(&mut data, len, p);
            }
            for (at, x) in flips {
                let at = at % data.len();
                data[at] ^= x;
            }
            data.truncate(cut % (data.len() + 1));
            for found in Reader::new(&data) {
                if let Found::Record { payload, .. } = found {
                    prop_assert!(payloads.contains(&payload));
                }
            }
        }
    }
}
