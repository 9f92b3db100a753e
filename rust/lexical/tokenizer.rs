//! How text is cut into terms: lower-cased Unicode alphanumeric words, optionally without
//! English stop words and through a light suffix stemmer.

/// English function words that carry no topic (used when `stop_words` is on).
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "for", "from",
    "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our", "ours", "she",
    "so", "some", "than", "that", "the", "their", "theirs", "them", "then", "there", "these",
    "they", "this", "those", "to", "too", "us", "was", "we", "were", "what", "when", "where",
    "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
];

/// How text is cut into terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tokenizer {
    pub stem: bool,
    pub stop_words: bool,
}

impl Tokenizer {
    /// The terms of `text`, in order (a term may repeat).
    pub fn tokens(&self, text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .filter(|w| !(self.stop_words && STOP_WORDS.binary_search(&w.as_str()).is_ok()))
            .map(|w| if self.stem { stem(&w) } else { w })
            .collect()
    }
}

/// A light English suffix stemmer: plurals, `-ing`, `-ed` and `-ly`, only on longer words; a
/// doubled final consonant left by `-ing`/`-ed` is undoubled (`running` → `run`) and a final
/// `e` dropped from longer stems (`dance`, `dancing` → `danc`).
fn stem(word: &str) -> String {
    let mut out = strip_suffix(word);
    let b = out.as_bytes();
    let n = b.len();
    let stripped = out.len() != word.len();
    if stripped && n >= 4 && b[n - 1] == b[n - 2] && !b"lsz".contains(&b[n - 1]) {
        out.pop();
    }
    if out.chars().count() >= 5 && out.ends_with('e') {
        out.pop();
    }
    out
}

/// The first of the stemmer's suffix rules that applies.
fn strip_suffix(word: &str) -> String {
    let n = word.chars().count();
    let strip = |suffix: &str, min: usize, with: &str| -> Option<String> {
        (n >= min && word.ends_with(suffix))
            .then(|| format!("{}{}", &word[..word.len() - suffix.len()], with))
    };
    strip("ies", 5, "y")
        .or_else(|| strip("sses", 5, "ss"))
        .or_else(|| strip("ing", 6, ""))
        .or_else(|| strip("ed", 5, ""))
        .or_else(|| strip("ly", 5, ""))
        .or_else(|| {
            let keep = word.ends_with("ss") || word.ends_with("us") || word.ends_with("is");
            if keep {
                None
            } else {
                strip("s", 4, "")
            }
        })
        .unwrap_or_else(|| word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Tokenizer = Tokenizer {
        stem: false,
        stop_words: false,
    };

    #[test]
    fn tokenizer_splits_lowers_stems_and_drops_stop_words() {
        assert_eq!(
            PLAIN.tokens("Hi, Caroline's café!"),
            ["hi", "caroline", "s", "café"]
        );
        let light = Tokenizer {
            stem: true,
            stop_words: true,
        };
        assert_eq!(
            light.tokens("The puppies were running to classes"),
            ["puppy", "run", "class"]
        );
        assert_eq!(
            light.tokens("dance dancing danced hopped falls kissed"),
            ["danc", "danc", "danc", "hop", "fall", "kiss"]
        );
        assert!(
            STOP_WORDS.windows(2).all(|w| w[0] < w[1]),
            "stop words must stay sorted"
        );
    }
}
