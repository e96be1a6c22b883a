//! HTML named character references the scanner decodes (data and
//! lookup). Generated from the HTML standard's list (Python's
//! `html.entities.html5`), keeping the names of ASCII punctuation, of
//! Latin-1, of letters and marks in Latin Extended, Greek and Cyrillic,
//! and of invisible format characters: the ones that can build or hide a
//! host name. Other names (quotes, dashes, spaces) need no decoding: as
//! raw text their `&` and `;` end a token just as the character would.
//! `Y` marks the legacy names browsers also read without the `;`.

const Y: bool = true;
const N: bool = false;

/// (name without `;`, code point, legacy), sorted by name.
#[rustfmt::skip]
static ENTITIES: [(&[u8], u32, bool); 465] = [
    (b"AElig", 0xC6, Y), (b"AMP", 0x26, Y), (b"Aacute", 0xC1, Y), (b"Abreve", 0x102, N),
    (b"Acirc", 0xC2, Y), (b"Acy", 0x410, N), (b"Agrave", 0xC0, Y), (b"Alpha", 0x391, N),
    (b"Amacr", 0x100, N), (b"Aogon", 0x104, N), (b"ApplyFunction", 0x2061, N),
    (b"Aring", 0xC5, Y), (b"Atilde", 0xC3, Y), (b"Auml", 0xC4, Y), (b"Bcy", 0x411, N),
    (b"Beta", 0x392, N), (b"CHcy", 0x427, N), (b"COPY", 0xA9, Y), (b"Cacute", 0x106, N),
    (b"Ccaron", 0x10C, N), (b"Ccedil", 0xC7, Y), (b"Ccirc", 0x108, N), (b"Cdot", 0x10A, N),
    (b"Cedilla", 0xB8, N), (b"CenterDot", 0xB7, N), (b"Chi", 0x3A7, N), (b"DJcy", 0x402, N),
    (b"DScy", 0x405, N), (b"DZcy", 0x40F, N), (b"Dcaron", 0x10E, N), (b"Dcy", 0x414, N),
    (b"Delta", 0x394, N), (b"DiacriticalAcute", 0xB4, N), (b"DiacriticalGrave", 0x60, N),
    (b"Dot", 0xA8, N), (b"DoubleDot", 0xA8, N), (b"Dstrok", 0x110, N), (b"ENG", 0x14A, N),
    (b"ETH", 0xD0, Y), (b"Eacute", 0xC9, Y), (b"Ecaron", 0x11A, N), (b"Ecirc", 0xCA, Y),
    (b"Ecy", 0x42D, N), (b"Edot", 0x116, N), (b"Egrave", 0xC8, Y), (b"Emacr", 0x112, N),
    (b"Eogon", 0x118, N), (b"Epsilon", 0x395, N), (b"Eta", 0x397, N), (b"Euml", 0xCB, Y),
    (b"Fcy", 0x424, N), (b"GJcy", 0x403, N), (b"GT", 0x3E, Y), (b"Gamma", 0x393, N),
    (b"Gammad", 0x3DC, N), (b"Gbreve", 0x11E, N), (b"Gcedil", 0x122, N), (b"Gcirc", 0x11C, N),
    (b"Gcy", 0x413, N), (b"Gdot", 0x120, N), (b"HARDcy", 0x42A, N), (b"Hat", 0x5E, N),
    (b"Hcirc", 0x124, N), (b"Hstrok", 0x126, N), (b"IEcy", 0x415, N), (b"IJlig", 0x132, N),
    (b"IOcy", 0x401, N), (b"Iacute", 0xCD, Y), (b"Icirc", 0xCE, Y), (b"Icy", 0x418, N),
    (b"Idot", 0x130, N), (b"Igrave", 0xCC, Y), (b"Imacr", 0x12A, N),
    (b"InvisibleComma", 0x2063, N), (b"InvisibleTimes", 0x2062, N), (b"Iogon", 0x12E, N),
    (b"Iota", 0x399, N), (b"Itilde", 0x128, N), (b"Iukcy", 0x406, N), (b"Iuml", 0xCF, Y),
    (b"Jcirc", 0x134, N), (b"Jcy", 0x419, N), (b"Jsercy", 0x408, N), (b"Jukcy", 0x404, N),
    (b"KHcy", 0x425, N), (b"KJcy", 0x40C, N), (b"Kappa", 0x39A, N), (b"Kcedil", 0x136, N),
    (b"Kcy", 0x41A, N), (b"LJcy", 0x409, N), (b"LT", 0x3C, Y), (b"Lacute", 0x139, N),
    (b"Lambda", 0x39B, N), (b"Lcaron", 0x13D, N), (b"Lcedil", 0x13B, N), (b"Lcy", 0x41B, N),
    (b"Lmidot", 0x13F, N), (b"Lstrok", 0x141, N), (b"Mcy", 0x41C, N), (b"Mu", 0x39C, N),
    (b"NJcy", 0x40A, N), (b"Nacute", 0x143, N), (b"Ncaron", 0x147, N), (b"Ncedil", 0x145, N),
    (b"Ncy", 0x41D, N), (b"NegativeMediumSpace", 0x200B, N), (b"NegativeThickSpace", 0x200B, N),
    (b"NegativeThinSpace", 0x200B, N), (b"NegativeVeryThinSpace", 0x200B, N),
    (b"NewLine", 0xA, N), (b"NoBreak", 0x2060, N), (b"NonBreakingSpace", 0xA0, N),
    (b"Ntilde", 0xD1, Y), (b"Nu", 0x39D, N), (b"OElig", 0x152, N), (b"Oacute", 0xD3, Y),
    (b"Ocirc", 0xD4, Y), (b"Ocy", 0x41E, N), (b"Odblac", 0x150, N), (b"Ograve", 0xD2, Y),
    (b"Omacr", 0x14C, N), (b"Omega", 0x3A9, N), (b"Omicron", 0x39F, N), (b"Oslash", 0xD8, Y),
    (b"Otilde", 0xD5, Y), (b"Ouml", 0xD6, Y), (b"Pcy", 0x41F, N), (b"Phi", 0x3A6, N),
    (b"Pi", 0x3A0, N), (b"PlusMinus", 0xB1, N), (b"Psi", 0x3A8, N), (b"QUOT", 0x22, Y),
    (b"REG", 0xAE, Y), (b"Racute", 0x154, N), (b"Rcaron", 0x158, N), (b"Rcedil", 0x156, N),
    (b"Rcy", 0x420, N), (b"Rho", 0x3A1, N), (b"SHCHcy", 0x429, N), (b"SHcy", 0x428, N),
    (b"SOFTcy", 0x42C, N), (b"Sacute", 0x15A, N), (b"Scaron", 0x160, N), (b"Scedil", 0x15E, N),
    (b"Scirc", 0x15C, N), (b"Scy", 0x421, N), (b"Sigma", 0x3A3, N), (b"THORN", 0xDE, Y),
    (b"TSHcy", 0x40B, N), (b"TScy", 0x426, N), (b"Tab", 0x9, N), (b"Tau", 0x3A4, N),
    (b"Tcaron", 0x164, N), (b"Tcedil", 0x162, N), (b"Tcy", 0x422, N), (b"Theta", 0x398, N),
    (b"Tstrok", 0x166, N), (b"Uacute", 0xDA, Y), (b"Ubrcy", 0x40E, N), (b"Ubreve", 0x16C, N),
    (b"Ucirc", 0xDB, Y), (b"Ucy", 0x423, N), (b"Udblac", 0x170, N), (b"Ugrave", 0xD9, Y),
    (b"Umacr", 0x16A, N), (b"UnderBar", 0x5F, N), (b"Uogon", 0x172, N), (b"Upsi", 0x3D2, N),
    (b"Upsilon", 0x3A5, N), (b"Uring", 0x16E, N), (b"Utilde", 0x168, N), (b"Uuml", 0xDC, Y),
    (b"Vcy", 0x412, N), (b"VerticalLine", 0x7C, N), (b"Wcirc", 0x174, N), (b"Xi", 0x39E, N),
    (b"YAcy", 0x42F, N), (b"YIcy", 0x407, N), (b"YUcy", 0x42E, N), (b"Yacute", 0xDD, Y),
    (b"Ycirc", 0x176, N), (b"Ycy", 0x42B, N), (b"Yuml", 0x178, N), (b"ZHcy", 0x416, N),
    (b"Zacute", 0x179, N), (b"Zcaron", 0x17D, N), (b"Zcy", 0x417, N), (b"Zdot", 0x17B, N),
    (b"ZeroWidthSpace", 0x200B, N), (b"Zeta", 0x396, N), (b"aacute", 0xE1, Y),
    (b"abreve", 0x103, N), (b"acirc", 0xE2, Y), (b"acute", 0xB4, Y), (b"acy", 0x430, N),
    (b"aelig", 0xE6, Y), (b"af", 0x2061, N), (b"agrave", 0xE0, Y), (b"alpha", 0x3B1, N),
    (b"amacr", 0x101, N), (b"amp", 0x26, Y), (b"angst", 0xC5, N), (b"aogon", 0x105, N),
    (b"apos", 0x27, N), (b"aring", 0xE5, Y), (b"ast", 0x2A, N), (b"atilde", 0xE3, Y),
    (b"auml", 0xE4, Y), (b"bcy", 0x431, N), (b"beta", 0x3B2, N), (b"brvbar", 0xA6, Y),
    (b"bsol", 0x5C, N), (b"cacute", 0x107, N), (b"ccaron", 0x10D, N), (b"ccedil", 0xE7, Y),
    (b"ccirc", 0x109, N), (b"cdot", 0x10B, N), (b"cedil", 0xB8, Y), (b"cent", 0xA2, Y),
    (b"centerdot", 0xB7, N), (b"chcy", 0x447, N), (b"chi", 0x3C7, N), (b"circledR", 0xAE, N),
    (b"colon", 0x3A, N), (b"comma", 0x2C, N), (b"commat", 0x40, N), (b"copy", 0xA9, Y),
    (b"curren", 0xA4, Y), (b"dcaron", 0x10F, N), (b"dcy", 0x434, N), (b"deg", 0xB0, Y),
    (b"delta", 0x3B4, N), (b"die", 0xA8, N), (b"digamma", 0x3DD, N), (b"div", 0xF7, N),
    (b"divide", 0xF7, Y), (b"djcy", 0x452, N), (b"dollar", 0x24, N), (b"dscy", 0x455, N),
    (b"dstrok", 0x111, N), (b"dzcy", 0x45F, N), (b"eacute", 0xE9, Y), (b"ecaron", 0x11B, N),
    (b"ecirc", 0xEA, Y), (b"ecy", 0x44D, N), (b"edot", 0x117, N), (b"egrave", 0xE8, Y),
    (b"emacr", 0x113, N), (b"eng", 0x14B, N), (b"eogon", 0x119, N), (b"epsi", 0x3B5, N),
    (b"epsilon", 0x3B5, N), (b"epsiv", 0x3F5, N), (b"equals", 0x3D, N), (b"eta", 0x3B7, N),
    (b"eth", 0xF0, Y), (b"euml", 0xEB, Y), (b"excl", 0x21, N), (b"fcy", 0x444, N),
    (b"fnof", 0x192, N), (b"frac12", 0xBD, Y), (b"frac14", 0xBC, Y), (b"frac34", 0xBE, Y),
    (b"gacute", 0x1F5, N), (b"gamma", 0x3B3, N), (b"gammad", 0x3DD, N), (b"gbreve", 0x11F, N),
    (b"gcirc", 0x11D, N), (b"gcy", 0x433, N), (b"gdot", 0x121, N), (b"gjcy", 0x453, N),
    (b"grave", 0x60, N), (b"gt", 0x3E, Y), (b"half", 0xBD, N), (b"hardcy", 0x44A, N),
    (b"hcirc", 0x125, N), (b"hstrok", 0x127, N), (b"iacute", 0xED, Y), (b"ic", 0x2063, N),
    (b"icirc", 0xEE, Y), (b"icy", 0x438, N), (b"iecy", 0x435, N), (b"iexcl", 0xA1, Y),
    (b"igrave", 0xEC, Y), (b"ijlig", 0x133, N), (b"imacr", 0x12B, N), (b"imath", 0x131, N),
    (b"imped", 0x1B5, N), (b"inodot", 0x131, N), (b"iocy", 0x451, N), (b"iogon", 0x12F, N),
    (b"iota", 0x3B9, N), (b"iquest", 0xBF, Y), (b"it", 0x2062, N), (b"itilde", 0x129, N),
    (b"iukcy", 0x456, N), (b"iuml", 0xEF, Y), (b"jcirc", 0x135, N), (b"jcy", 0x439, N),
    (b"jmath", 0x237, N), (b"jsercy", 0x458, N), (b"jukcy", 0x454, N), (b"kappa", 0x3BA, N),
    (b"kappav", 0x3F0, N), (b"kcedil", 0x137, N), (b"kcy", 0x43A, N), (b"kgreen", 0x138, N),
    (b"khcy", 0x445, N), (b"kjcy", 0x45C, N), (b"lacute", 0x13A, N), (b"lambda", 0x3BB, N),
    (b"laquo", 0xAB, Y), (b"lbrace", 0x7B, N), (b"lbrack", 0x5B, N), (b"lcaron", 0x13E, N),
    (b"lcedil", 0x13C, N), (b"lcub", 0x7B, N), (b"lcy", 0x43B, N), (b"ljcy", 0x459, N),
    (b"lmidot", 0x140, N), (b"lowbar", 0x5F, N), (b"lpar", 0x28, N), (b"lrm", 0x200E, N),
    (b"lsqb", 0x5B, N), (b"lstrok", 0x142, N), (b"lt", 0x3C, Y), (b"macr", 0xAF, Y),
    (b"mcy", 0x43C, N), (b"micro", 0xB5, Y), (b"midast", 0x2A, N), (b"middot", 0xB7, Y),
    (b"mu", 0x3BC, N), (b"nacute", 0x144, N), (b"napos", 0x149, N), (b"nbsp", 0xA0, Y),
    (b"ncaron", 0x148, N), (b"ncedil", 0x146, N), (b"ncy", 0x43D, N), (b"njcy", 0x45A, N),
    (b"not", 0xAC, Y), (b"ntilde", 0xF1, Y), (b"nu", 0x3BD, N), (b"num", 0x23, N),
    (b"oacute", 0xF3, Y), (b"ocirc", 0xF4, Y), (b"ocy", 0x43E, N), (b"odblac", 0x151, N),
    (b"oelig", 0x153, N), (b"ograve", 0xF2, Y), (b"ohm", 0x3A9, N), (b"omacr", 0x14D, N),
    (b"omega", 0x3C9, N), (b"omicron", 0x3BF, N), (b"ordf", 0xAA, Y), (b"ordm", 0xBA, Y),
    (b"oslash", 0xF8, Y), (b"otilde", 0xF5, Y), (b"ouml", 0xF6, Y), (b"para", 0xB6, Y),
    (b"pcy", 0x43F, N), (b"percnt", 0x25, N), (b"period", 0x2E, N), (b"phi", 0x3C6, N),
    (b"phiv", 0x3D5, N), (b"pi", 0x3C0, N), (b"piv", 0x3D6, N), (b"plus", 0x2B, N),
    (b"plusmn", 0xB1, Y), (b"pm", 0xB1, N), (b"pound", 0xA3, Y), (b"psi", 0x3C8, N),
    (b"quest", 0x3F, N), (b"quot", 0x22, Y), (b"racute", 0x155, N), (b"raquo", 0xBB, Y),
    (b"rbrace", 0x7D, N), (b"rbrack", 0x5D, N), (b"rcaron", 0x159, N), (b"rcedil", 0x157, N),
    (b"rcub", 0x7D, N), (b"rcy", 0x440, N), (b"reg", 0xAE, Y), (b"rho", 0x3C1, N),
    (b"rhov", 0x3F1, N), (b"rlm", 0x200F, N), (b"rpar", 0x29, N), (b"rsqb", 0x5D, N),
    (b"sacute", 0x15B, N), (b"scaron", 0x161, N), (b"scedil", 0x15F, N), (b"scirc", 0x15D, N),
    (b"scy", 0x441, N), (b"sect", 0xA7, Y), (b"semi", 0x3B, N), (b"shchcy", 0x449, N),
    (b"shcy", 0x448, N), (b"shy", 0xAD, Y), (b"sigma", 0x3C3, N), (b"sigmaf", 0x3C2, N),
    (b"sigmav", 0x3C2, N), (b"softcy", 0x44C, N), (b"sol", 0x2F, N),
    (b"straightepsilon", 0x3F5, N), (b"straightphi", 0x3D5, N), (b"strns", 0xAF, N),
    (b"sup1", 0xB9, Y), (b"sup2", 0xB2, Y), (b"sup3", 0xB3, Y), (b"szlig", 0xDF, Y),
    (b"tau", 0x3C4, N), (b"tcaron", 0x165, N), (b"tcedil", 0x163, N), (b"tcy", 0x442, N),
    (b"theta", 0x3B8, N), (b"thetasym", 0x3D1, N), (b"thetav", 0x3D1, N), (b"thorn", 0xFE, Y),
    (b"times", 0xD7, Y), (b"tscy", 0x446, N), (b"tshcy", 0x45B, N), (b"tstrok", 0x167, N),
    (b"uacute", 0xFA, Y), (b"ubrcy", 0x45E, N), (b"ubreve", 0x16D, N), (b"ucirc", 0xFB, Y),
    (b"ucy", 0x443, N), (b"udblac", 0x171, N), (b"ugrave", 0xF9, Y), (b"umacr", 0x16B, N),
    (b"uml", 0xA8, Y), (b"uogon", 0x173, N), (b"upsi", 0x3C5, N), (b"upsih", 0x3D2, N),
    (b"upsilon", 0x3C5, N), (b"uring", 0x16F, N), (b"utilde", 0x169, N), (b"uuml", 0xFC, Y),
    (b"varepsilon", 0x3F5, N), (b"varkappa", 0x3F0, N), (b"varphi", 0x3D5, N),
    (b"varpi", 0x3D6, N), (b"varrho", 0x3F1, N), (b"varsigma", 0x3C2, N), (b"vartheta", 0x3D1, N),
    (b"vcy", 0x432, N), (b"verbar", 0x7C, N), (b"vert", 0x7C, N), (b"wcirc", 0x175, N),
    (b"xi", 0x3BE, N), (b"yacute", 0xFD, Y), (b"yacy", 0x44F, N), (b"ycirc", 0x177, N),
    (b"ycy", 0x44B, N), (b"yen", 0xA5, Y), (b"yicy", 0x457, N), (b"yucy", 0x44E, N),
    (b"yuml", 0xFF, Y), (b"zacute", 0x17A, N), (b"zcaron", 0x17E, N), (b"zcy", 0x437, N),
    (b"zdot", 0x17C, N), (b"zeta", 0x3B6, N), (b"zhcy", 0x436, N), (b"zwj", 0x200D, N),
    (b"zwnj", 0x200C, N),
];

/// The character `&name;` stands for.
pub(super) fn lookup(name: &[u8]) -> Option<char> {
    let i = ENTITIES.binary_search_by(|&(n, _, _)| n.cmp(name)).ok()?;
    char::from_u32(ENTITIES[i].1)
}

/// The character a legacy `&name` stands for without its `;`.
pub(super) fn legacy(name: &[u8]) -> Option<char> {
    let i = ENTITIES.binary_search_by(|&(n, _, _)| n.cmp(name)).ok()?;
    let (_, cp, legacy) = ENTITIES[i];
    legacy.then(|| char::from_u32(cp)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(ENTITIES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn names_that_build_hosts() {
        assert_eq!(lookup(b"period"), Some('.'));
        assert_eq!(lookup(b"sol"), Some('/'));
        assert_eq!(lookup(b"colon"), Some(':'));
        assert_eq!(lookup(b"commat"), Some('@'));
        assert_eq!(lookup(b"shy"), Some('\u{ad}'));
        assert_eq!(lookup(b"ZeroWidthSpace"), Some('\u{200b}'));
        assert_eq!(lookup(b"uuml"), Some('ü'));
        assert_eq!(legacy(b"nbsp"), Some('\u{a0}'));
        assert_eq!(legacy(b"amp"), Some('&'));
        assert_eq!(legacy(b"period"), None);
        assert_eq!(lookup(b"nosuchname"), None);
    }
}
