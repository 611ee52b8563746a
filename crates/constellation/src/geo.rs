//! Geometry on a spherical Earth: vectors in an Earth-centred frame, latitude/longitude,
//! great-circle distances, elevation angles, and ground places (built-in cities, user files).

use crate::ConstellationError;
use rand_core::RngCore;

/// Mean Earth radius (km), the sphere of the thesis' model.
pub const EARTH_RADIUS_KM: f64 = 6371.0;
/// Earth's gravitational parameter (km³/s²).
pub const MU_KM3_S2: f64 = 398_600.441_8;
/// Speed of light in vacuum (km/s); every link's delay is its length over this.
pub const C_KM_S: f64 = 299_792.458;
/// Earth's rotation rate relative to the stars (rad/s).
pub const EARTH_ROTATION_RAD_S: f64 = 7.292_115_9e-5;

/// A point or direction in an Earth-centred frame (km).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Vec3 {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

impl Vec3 {
    pub const fn new(x: f64, y: f64, z: f64) -> Vec3 {
        Vec3 { x, y, z }
    }
    pub fn dot(self, o: Vec3) -> f64 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }
    pub fn minus(self, o: Vec3) -> Vec3 {
        Vec3::new(self.x - o.x, self.y - o.y, self.z - o.z)
    }
    pub fn scale(self, k: f64) -> Vec3 {
        Vec3::new(self.x * k, self.y * k, self.z * k)
    }
    pub fn norm(self) -> f64 {
        self.dot(self).sqrt()
    }
    pub fn dist(self, o: Vec3) -> f64 {
        self.minus(o).norm()
    }
    /// Latitude and longitude (degrees) of the direction of this vector.
    pub fn lat_lon_deg(self) -> (f64, f64) {
        let r = self.norm().max(1e-12);
        (
            (self.z / r).clamp(-1.0, 1.0).asin().to_degrees(),
            self.y.atan2(self.x).to_degrees(),
        )
    }
}

/// The point at latitude/longitude (degrees) and distance `r_km` from the Earth's centre.
pub fn from_lat_lon_deg(lat_deg: f64, lon_deg: f64, r_km: f64) -> Vec3 {
    let (la, lo) = (lat_deg.to_radians(), lon_deg.to_radians());
    Vec3::new(
        r_km * la.cos() * lo.cos(),
        r_km * la.cos() * lo.sin(),
        r_km * la.sin(),
    )
}

/// Great-circle distance (km) on the mean-radius sphere.
pub fn great_circle_km(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dp = p2 - p1;
    let dl = (lon2 - lon1).to_radians();
    let h = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.sqrt().clamp(0.0, 1.0).asin()
}

/// Elevation (degrees) of `sat` seen from the ground point `ground` (both Earth-fixed).
pub fn elevation_deg(ground: Vec3, sat: Vec3) -> f64 {
    let d = sat.minus(ground);
    let up = ground.scale(1.0 / ground.norm().max(1e-12));
    (d.dot(up) / d.norm().max(1e-12))
        .clamp(-1.0, 1.0)
        .asin()
        .to_degrees()
}

/// Whether the straight segment a–b stays above `floor_km` from the Earth's centre (an ISL's
/// line of sight must clear the Earth and the lower atmosphere).
pub fn clears(a: Vec3, b: Vec3, floor_km: f64) -> bool {
    let d = b.minus(a);
    let len2 = d.dot(d);
    if len2 == 0.0 {
        return a.norm() >= floor_km;
    }
    let t = (-a.dot(d) / len2).clamp(0.0, 1.0);
    a.add_scaled(d, t).norm() >= floor_km
}

impl Vec3 {
    fn add_scaled(self, d: Vec3, t: f64) -> Vec3 {
        Vec3::new(self.x + d.x * t, self.y + d.y * t, self.z + d.z * t)
    }
}

/// A ground terminal's location.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    pub name: String,
    pub lat_deg: f64,
    pub lon_deg: f64,
}

impl Place {
    /// A place, with its latitude and longitude checked.
    pub fn new(name: &str, lat_deg: f64, lon_deg: f64) -> Result<Place, ConstellationError> {
        if !(-90.0..=90.0).contains(&lat_deg) {
            return Err(ConstellationError::Request(format!(
                "latitude of '{name}' must be within -90..90 degrees, got {lat_deg}"
            )));
        }
        if !(-180.0..=360.0).contains(&lon_deg) {
            return Err(ConstellationError::Request(format!(
                "longitude of '{name}' must be within -180..360 degrees, got {lon_deg}"
            )));
        }
        Ok(Place {
            name: name.to_string(),
            lat_deg,
            lon_deg,
        })
    }
    /// Earth-fixed position on the surface.
    pub fn position(&self) -> Vec3 {
        from_lat_lon_deg(self.lat_deg, self.lon_deg, EARTH_RADIUS_KM)
    }
    pub fn distance_km(&self, o: &Place) -> f64 {
        great_circle_km(self.lat_deg, self.lon_deg, o.lat_deg, o.lon_deg)
    }
}

/// Built-in cities: (name, latitude, longitude) in degrees (city centres, rounded).
pub const CITIES: &[(&str, f64, f64)] = &[
    ("New York", 40.7128, -74.0060),
    ("San Francisco", 37.7749, -122.4194),
    ("London", 51.5074, -0.1278),
    ("Tokyo", 35.6762, 139.6503),
    ("Sydney", -33.8688, 151.2093),
    ("São Paulo", -23.5505, -46.6333),
    ("Nairobi", -1.2921, 36.8219),
    ("Los Angeles", 34.0522, -118.2437),
    ("Chicago", 41.8781, -87.6298),
    ("Seattle", 47.6062, -122.3321),
    ("Toronto", 43.6532, -79.3832),
    ("Mexico City", 19.4326, -99.1332),
    ("Anchorage", 61.2181, -149.9003),
    ("Honolulu", 21.3069, -157.8583),
    ("Bogotá", 4.7110, -74.0721),
    ("Lima", -12.0464, -77.0428),
    ("Buenos Aires", -34.6037, -58.3816),
    ("Santiago", -33.4489, -70.6693),
    ("Reykjavík", 64.1466, -21.9426),
    ("Paris", 48.8566, 2.3522),
    ("Madrid", 40.4168, -3.7038),
    ("Berlin", 52.5200, 13.4050),
    ("Stockholm", 59.3293, 18.0686),
    ("Moscow", 55.7558, 37.6173),
    ("Istanbul", 41.0082, 28.9784),
    ("Cairo", 30.0444, 31.2357),
    ("Lagos", 6.5244, 3.3792),
    ("Johannesburg", -26.2041, 28.0473),
    ("Cape Town", -33.9249, 18.4241),
    ("Dubai", 25.2048, 55.2708),
    ("Mumbai", 19.0760, 72.8777),
    ("Delhi", 28.7041, 77.1025),
    ("Singapore", 1.3521, 103.8198),
    ("Jakarta", -6.2088, 106.8456),
    ("Hong Kong", 22.3193, 114.1694),
    ("Shanghai", 31.2304, 121.4737),
    ("Beijing", 39.9042, 116.4074),
    ("Seoul", 37.5665, 126.9780),
    ("Manila", 14.5995, 120.9842),
    ("Auckland", -36.8485, 174.7633),
];

/// Lower-case letters and digits only, accents folded ("São Paulo" → "saopaulo").
fn key(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'á' | 'à' | 'â' | 'ã' | 'ä' | 'Á' | 'Ã' => 'a',
            'é' | 'è' | 'ê' | 'ë' | 'É' => 'e',
            'í' | 'ì' | 'î' | 'ï' | 'Í' => 'i',
            'ó' | 'ò' | 'ô' | 'õ' | 'ö' | 'Ó' => 'o',
            'ú' | 'ù' | 'û' | 'ü' | 'Ú' => 'u',
            'ç' => 'c',
            'ñ' => 'n',
            c => c.to_ascii_lowercase(),
        })
        .filter(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// A built-in city by name (case, spaces, hyphens and accents ignored; "NY", "SF" and "LA"
/// accepted), or "LAT,LON" in degrees.
pub fn place(name: &str) -> Result<Place, ConstellationError> {
    let k = key(name);
    let alias = match k.as_str() {
        "ny" | "nyc" => "newyork",
        "sf" => "sanfrancisco",
        "la" => "losangeles",
        other => other,
    };
    if let Some(&(n, lat, lon)) = CITIES.iter().find(|(n, _, _)| key(n) == alias) {
        return Place::new(n, lat, lon);
    }
    let parts: Vec<&str> = name.split(',').map(str::trim).collect();
    if let [a, b] = parts.as_slice() {
        if let (Ok(lat), Ok(lon)) = (a.parse::<f64>(), b.parse::<f64>()) {
            return Place::new(name, lat, lon);
        }
    }
    Err(ConstellationError::UnknownPlace(name.to_string()))
}

/// Parses a places file: one `NAME, LAT, LON` per line (degrees), `#` comments, blank lines
/// ignored.
pub fn parse_places(text: &str, source_name: &str) -> Result<Vec<Place>, ConstellationError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let err = |reason: String| ConstellationError::Line {
            source_name: source_name.to_string(),
            line: i + 1,
            reason,
        };
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let [name, lat, lon] = f.as_slice() else {
            return Err(err(format!("expected 'NAME, LAT, LON', got '{l}'")));
        };
        let lat: f64 = lat
            .parse()
            .map_err(|_| err(format!("latitude '{lat}' is not a number")))?;
        let lon: f64 = lon
            .parse()
            .map_err(|_| err(format!("longitude '{lon}' is not a number")))?;
        out.push(Place::new(name, lat, lon).map_err(|e| err(e.to_string()))?);
    }
    if out.is_empty() {
        return Err(ConstellationError::Request(format!(
            "{source_name}: no places"
        )));
    }
    Ok(out)
}

/// A uniform random number in [0, 1).
pub fn unit(rng: &mut dyn RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A point drawn uniformly over the sphere's surface.
pub fn random_place(rng: &mut dyn RngCore, name: &str) -> Place {
    let z = 2.0 * unit(rng) - 1.0;
    let lon = 360.0 * unit(rng) - 180.0;
    Place {
        name: name.to_string(),
        lat_deg: z.asin().to_degrees(),
        lon_deg: lon,
    }
}

/// `n` ground stations for benchmarks and forwarding state: the built-in cities first, then
/// points drawn uniformly (seed 1) over the band within 50° of the equator, which every preset
/// covers (starlink-550 and kuiper-630 do not reach the poles).
pub fn stations(n: usize) -> Vec<Place> {
    use rand_chacha::rand_core::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    (0..n)
        .map(|i| match CITIES.get(i) {
            Some(&(name, la, lo)) => Place {
                name: name.to_string(),
                lat_deg: la,
                lon_deg: lo,
            },
            None => loop {
                let p = random_place(&mut rng, &format!("random-{i}"));
                if p.lat_deg.abs() <= 50.0 {
                    break p;
                }
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn great_circle_known_pairs() {
        let ny = place("New York").unwrap();
        let sf = place("sf").unwrap();
        let d = ny.distance_km(&sf);
        assert!((d - 4130.0).abs() < 30.0, "NY-SF {d} km");
        assert!(
            (great_circle_km(0.0, 0.0, 0.0, 180.0) - std::f64::consts::PI * EARTH_RADIUS_KM).abs()
                < 1e-6
        );
    }

    #[test]
    fn places_by_name_accents_and_coordinates() {
        assert_eq!(place("sao paulo").unwrap().name, "São Paulo");
        assert_eq!(place("SÃO-PAULO").unwrap().name, "São Paulo");
        let p = place("10.5, -20").unwrap();
        assert_eq!((p.lat_deg, p.lon_deg), (10.5, -20.0));
        assert!(matches!(
            place("Atlantis"),
            Err(ConstellationError::UnknownPlace(_))
        ));
        assert!(place("95,0").is_err());
        for c in [
            "New York",
            "San Francisco",
            "London",
            "Tokyo",
            "Sydney",
            "São Paulo",
            "Nairobi",
        ] {
            assert!(place(c).is_ok(), "{c}");
        }
    }

    #[test]
    fn places_file_errors_name_the_line() {
        let ok = parse_places("# x\nHome, 1.5, 2\n\nWork,3,4 # comment\n", "f").unwrap();
        assert_eq!(ok.len(), 2);
        let e = parse_places("Home, 1.5\n", "f").unwrap_err().to_string();
        assert!(
            e.contains("f line 1") && e.contains("NAME, LAT, LON"),
            "{e}"
        );
        let e = parse_places("A, x, 2\n", "f").unwrap_err().to_string();
        assert!(e.contains("latitude 'x'"), "{e}");
    }

    #[test]
    fn elevation_overhead_and_horizon() {
        let g = from_lat_lon_deg(10.0, 20.0, EARTH_RADIUS_KM);
        let s = from_lat_lon_deg(10.0, 20.0, EARTH_RADIUS_KM + 780.0);
        assert!((elevation_deg(g, s) - 90.0).abs() < 1e-9);
        let far = from_lat_lon_deg(-10.0, -160.0, EARTH_RADIUS_KM + 780.0);
        assert!(elevation_deg(g, far) < 0.0);
        assert!(!clears(g.scale(1.1), far.scale(1.0), EARTH_RADIUS_KM));
    }
}
