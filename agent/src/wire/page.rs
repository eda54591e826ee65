//! Pages of list answers, so that every answer of the API fits one frame whatever the store or
//! the mesh holds.
//!
//! A list request says where to resume (`after`: the key of the last item the caller holds) and
//! how many items it wants (`limit`, clamped to 1..=[`PAGE_ITEMS_MAX`]). The answer holds the
//! next items in key order, stopping before the item that would take the page's encoding past
//! [`PAGE_BYTES_MAX`], but never empty while an item is left: the largest item a list carries
//! still makes a page on its own. It names its last key in `next_after` when more follow. A list
//! may change between pages (a node joins, a workload is deleted): each page is exact as of its
//! own call, and an item present throughout appears once, in order (kubectl's `continue`,
//! Nomad's `next_token`).
//!
//! **Architecture Invariant:** a page encodes to at most [`PAGE_BYTES_MAX`] plus one item, and
//! every item a list answer carries is bounded far below
//! `API_FRAME_MAX_BYTES - PAGE_BYTES_MAX` (`agent/tests/api_pages.rs` builds the largest of
//! each kind and checks it).

use serde::Serialize;

/// Most bytes of items in a page before its last item: a quarter of
/// [`crate::wire::API_FRAME_MAX_BYTES`], leaving room for one item of any kind past it.
pub const PAGE_BYTES_MAX: usize = 1 << 20;
/// Most items in a page.
pub const PAGE_ITEMS_MAX: u32 = 1000;

/// Bytes `item` takes in a frame body.
pub fn encoded_len<T: Serialize + ?Sized>(item: &T) -> usize {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(item, &mut size, crate::wire::bincode_config())
        .expect("API types always encode");
    size.bytes_written
}

/// A caller's `limit` as a count of items: 1 to [`PAGE_ITEMS_MAX`].
pub fn items_max(limit: u32) -> usize {
    limit.clamp(1, PAGE_ITEMS_MAX) as usize
}

/// The first page of `items` (already in key order, after the caller's `after`): at most
/// [`items_max`]`(limit)` items and [`PAGE_BYTES_MAX`] bytes before the last one, at least one.
/// Returns it with the key of its last item when more follow.
pub fn take_page<T: Serialize, K>(
    items: impl IntoIterator<Item = T>,
    limit: u32,
    key: impl Fn(&T) -> K,
) -> (Vec<T>, Option<K>) {
    let count_max = items_max(limit);
    let mut page = Vec::new();
    let mut bytes = 0;
    let mut items = items.into_iter().peekable();
    while let Some(item) = items.peek() {
        if page.len() == count_max {
            break;
        }
        let size = encoded_len(item);
        if !page.is_empty() && bytes + size > PAGE_BYTES_MAX {
            break;
        }
        bytes += size;
        page.extend(items.next());
    }
    let next_after = match items.peek() {
        Some(_) => page.last().map(key),
        None => None,
    };
    (page, next_after)
}

/// `text` cut to at most `max` bytes (at least 3) on a character boundary, ending in `...` when
/// cut: free text from a runtime or a peer, bounded before it goes in an answer.
pub fn cut_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(page: &[(u32, Vec<u8>)]) -> Vec<u32> {
        page.iter().map(|(k, _)| *k).collect()
    }

    #[test]
    fn pages_stop_at_the_count_or_the_bytes_and_never_come_back_empty() {
        let small: Vec<(u32, Vec<u8>)> = (0..5).map(|k| (k, vec![0; 10])).collect();
        let (page, next) = take_page(small.clone(), 2, |(k, _)| *k);
        assert_eq!((keys(&page), next), (vec![0, 1], Some(1)));
        let (page, next) = take_page(small.clone(), 0, |(k, _)| *k);
        assert_eq!(
            (keys(&page), next),
            (vec![0], Some(0)),
            "limit 0 asks for one"
        );
        let (page, next) = take_page(small, u32::MAX, |(k, _)| *k);
        assert_eq!((keys(&page), next), (vec![0, 1, 2, 3, 4], None));

        // Items of 0.4 of the budget: two per page; one item over the budget is a page alone.
        let big = PAGE_BYTES_MAX * 2 / 5;
        let items = vec![
            (0, vec![0; big]),
            (1, vec![0; big]),
            (2, vec![0; big]),
            (3, vec![0; PAGE_BYTES_MAX + 1]),
            (4, vec![0; 1]),
        ];
        let (page, next) = take_page(items.clone(), 10, |(k, _)| *k);
        assert_eq!((keys(&page), next), (vec![0, 1], Some(1)));
        assert!(page.iter().map(encoded_len).sum::<usize>() <= PAGE_BYTES_MAX);
        let (page, next) = take_page(items[3..].to_vec(), 10, |(k, _)| *k);
        assert_eq!((keys(&page), next), (vec![3], Some(3)));
        let (page, next) = take_page(Vec::<(u32, Vec<u8>)>::new(), 10, |(k, _)| *k);
        assert_eq!((page.len(), next), (0, None));
    }

    #[test]
    fn cut_text_keeps_characters_whole() {
        assert_eq!(cut_text("short".into(), 10), "short");
        assert_eq!(cut_text("abcdefghij".into(), 8), "abcde...");
        // "é" is two bytes: a cut inside it moves before it.
        let cut = cut_text("aaaaééé".into(), 8);
        assert_eq!(cut, "aaaa...");
        assert!(cut.len() <= 8);
    }

    #[test]
    fn encoded_len_is_the_frame_body_length() {
        let item = ("web".to_string(), vec![7u8; 300], Some(42u64));
        let body = bincode::serde::encode_to_vec(&item, crate::wire::bincode_config()).unwrap();
        assert_eq!(encoded_len(&item), body.len());
    }
}
