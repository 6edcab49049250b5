"""The Velodyne and Hesai presets against their sources, transcribed here independently.

Each table below is copied from the public file named above it, in that file's own units
(Velodyne calibrations in radians, Hesai angle files in degrees, firing times in ns); the tests
convert them and compare with what the preset YAML gives and with the pattern it generates.

Sign conventions (the derivations are in the presets' comments and checked in
``test_velodyne_rot_correction_sign`` / ``test_hesai_azimuth_sign``): a Velodyne rot_correction
r is added counter-clockwise, so ``azimuth_offset_deg = +degrees(r)``; a Hesai angle-file
azimuth is clockwise-positive, so ``azimuth_offset_deg = -Azimuth``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.config import ScannerConfig, load_scanner
from simulator.sensor.scanner import SpinningPattern, pattern_for

#: The Velodyne driver repository and commit the calibration tables below are copied from.
VELODYNE = "ros-drivers/velodyne @ 29abd0e1361cb7f5eda451d2b51c35eeca45e0d5"

# VELODYNE, velodyne_pointcloud/params/VLP16db.yaml: laser_id, vert_correction (rad),
# rot_correction (rad).
VLP16_DB = """
0, -0.2617993877991494, 0.0
1, 0.017453292519943295, 0.0
2, -0.22689280275926285, 0.0
3, 0.05235987755982989, 0.0
4, -0.19198621771937624, 0.0
5, 0.08726646259971647, 0.0
6, -0.15707963267948966, 0.0
7, 0.12217304763960307, 0.0
8, -0.12217304763960307, 0.0
9, 0.15707963267948966, 0.0
10, -0.08726646259971647, 0.0
11, 0.19198621771937624, 0.0
12, -0.05235987755982989, 0.0
13, 0.22689280275926285, 0.0
14, -0.017453292519943295, 0.0
15, 0.2617993877991494, 0.0
"""

# VELODYNE, velodyne_pointcloud/params/32db.yaml: laser_id (DSR), vert_correction (rad),
# rot_correction (rad); last column: the vertical angle of the HDL-32E User's Manual (63-9113)
# "Laser Firing Sequence" table, degrees.
HDL32E_DB = """
0, -0.5352924815866609, 0.0, -30.67
1, -0.1628392174657417, 0.0, -9.33
2, -0.5119050696099369, 0.0, -29.33
3, -0.13962634015954636, 0.0, -8
4, -0.4886921905584123, 0.0, -28
5, -0.11641346285335104, 0.0, -6.66
6, -0.4654793115068877, 0.0, -26.66
7, -0.09302604738596851, 0.0, -5.33
8, -0.44209189953016365, 0.0, -25.33
9, -0.06981317007977318, 0.0, -4
10, -0.4188790204786391, 0.0, -24
11, -0.046600292773577856, 0.0, -2.67
12, -0.39566614142711454, 0.0, -22.67
13, -0.023212879051524585, 0.0, -1.33
14, -0.3722787294503905, 0.0, -21.33
15, 0.0, 0.0, 0
16, -0.3490658503988659, 0.0, -20
17, 0.023212879051524585, 0.0, 1.33
18, -0.32585297134734137, 0.0, -18.67
19, 0.046600292773577856, 0.0, 2.67
20, -0.30246555937061725, 0.0, -17.33
21, 0.06981317007977318, 0.0, 4
22, -0.2792526803190927, 0.0, -16
23, 0.09302604738596851, 0.0, 5.33
24, -0.25603980126756815, 0.0, -14.67
25, 0.11641346285335104, 0.0, 6.67
26, -0.23265238929084414, 0.0, -13.33
27, 0.13962634015954636, 0.0, 8
28, -0.20943951023931956, 0.0, -12
29, 0.1628392174657417, 0.0, 9.33
30, -0.18622663118779495, 0.0, -10.67
31, 0.18622663118779495, 0.0, 10.67
"""

# VELODYNE, velodyne_pointcloud/params/64e_utexas.yaml: laser_id, vert_correction (rad),
# rot_correction (rad).
HDL64E_DB = """
0, -0.124932751059532, -0.0698131695389748
1, -0.118993431329727, -0.0392699092626572
2, 0.0055470340885222, 0.0698131695389748
3, 0.0114863449707627, 0.104719758033752
4, -0.113056324422359, 0.013962633907795
5, -0.107121199369431, 0.0392699092626572
6, -0.148716226220131, 0
7, -0.142765983939171, 0.0226892791688442
8, -0.101187855005264, 0.0820304751396179
9, -0.0952560678124428, 0.113446399569511
10, -0.136818811297417, 0.0698131695389748
11, -0.130874469876289, 0.104719758033752
12, -0.05375986546278, -0.068067841231823
13, -0.0478330813348293, -0.0349065847694874
14, -0.0893256440758705, -0.0837758108973503
15, -0.0833963677287102, -0.0479965545237064
16, -0.0419059917330742, 0.00872664619237185
17, -0.035978376865387, 0.0392699092626572
18, -0.0774680152535439, 0
19, -0.0715404152870178, 0.0305432621389627
20, -0.0300500374287367, 0.0855211317539215
21, -0.024120757356286, 0.109083078801632
22, -0.0656133219599724, 0.0698131695389748
23, -0.0596865378320217, 0.104719758033752
24, 0.0174280721694231, -0.0610865242779255
25, 0.0233724191784859, -0.0349065847694874
26, -0.0181903336197138, -0.0785398185253143
27, -0.0122585473582149, -0.0471238903701305
28, 0.0293195936828852, 0.0104719763621688
29, 0.0352698266506195, 0.0349065847694874
30, -0.00632520206272602, -0.00436332309618592
31, -0.000390077300835401, 0.0296705979853868
32, -0.396850973367691, -0.122173048555851
33, -0.387918144464493, -0.0610865242779255
34, -0.200955957174301, 0.0959931090474129
35, -0.192023113369942, 0.148352980613708
36, -0.378992766141891, -0.00872664619237185
37, -0.370074152946472, 0.0610865242779255
38, -0.43128889799118, -0.0174532923847437
39, -0.423701733350754, 0.0349065847694874
40, -0.361161530017853, 0.122173048555851
41, -0.352254241704941, 0.174532920122147
42, -0.414742022752762, 0.104719758033752
43, -0.405792057514191, 0.165806278586388
44, -0.28999200463295, -0.113446399569511
45, -0.281101644039154, -0.0567231997847557
46, -0.343351542949677, -0.13962633907795
47, -0.334452718496323, -0.0872664600610733
48, -0.272210210561752, 0
49, -0.26331701874733, 0.0558505356311798
50, -0.323895305395126, -0.0174532923847437
51, -0.316663861274719, 0.0349065847694874
52, -0.254421383142471, 0.122173048555851
53, -0.245522528886795, 0.165806278586388
54, -0.307772427797318, 0.104719758033752
55, -0.298882067203522, 0.157079637050629
56, -0.183082059025764, -0.104719758033752
57, -0.17413204908371, -0.0610865242779255
58, -0.236619830131531, -0.13962633907795
59, -0.22771255671978, -0.0785398185253143
60, -0.16517236828804, 0
61, -0.156202226877213, 0.0436332300305367
62, -0.218799933791161, -0.0174532923847437
63, -0.209881335496902, 0.0314159244298935
"""

# VELODYNE, velodyne_pointcloud/params/VeloView-VLP-32C.yaml: laser_id, vert_correction (rad),
# rot_correction (rad).
VLP32C_DB = """
0, -0.4363323129985824, -0.024434609527920613
1, -0.017453292519943295, 0.07330382858376185
2, -0.029094638630745476, -0.024434609527920613
3, -0.2729520417193932, 0.024434609527920613
4, -0.19739673840055869, -0.024434609527920613
5, 0.0, 0.024434609527920613
6, -0.011641346110802179, -0.07330382858376185
7, -0.15433946575385857, 0.024434609527920613
8, -0.12660618393966866, -0.024434609527920613
9, 0.005811946409141118, 0.07330382858376185
10, -0.005811946409141118, -0.024434609527920613
11, -0.10730284241261137, 0.024434609527920613
12, -0.0930784090088576, -0.07330382858376185
13, 0.02326523892908441, 0.024434609527920613
14, 0.011641346110802179, -0.07330382858376185
15, -0.06981317007977318, 0.024434609527920613
16, -0.08145451619057535, -0.024434609527920613
17, 0.029094638630745476, 0.07330382858376185
18, 0.017453292519943295, -0.024434609527920613
19, -0.06400122367063206, 0.07330382858376185
20, -0.058171823968971005, -0.07330382858376185
21, 0.058171823968971005, 0.024434609527920613
22, 0.04071853144902771, -0.024434609527920613
23, -0.04654793115068877, 0.024434609527920613
24, -0.05235987755982989, -0.024434609527920613
25, 0.12217304763960307, 0.024434609527920613
26, 0.08145451619057535, -0.024434609527920613
27, -0.04071853144902771, 0.07330382858376185
28, -0.03490658503988659, -0.07330382858376185
29, 0.2617993877991494, 0.024434609527920613
30, 0.18034487160857407, -0.024434609527920613
31, -0.02326523892908441, 0.024434609527920613
"""

# VLP-32C User Manual 63-9325 Rev. C, Table 9-6: elevation (deg) -> laser id.
VLP32C_MANUAL_ELEVATION_TO_LASER = {
    15.0: 29, 10.333: 30, 7.0: 25, 4.667: 26, 3.333: 21, 2.333: 22, 1.667: 17, 1.333: 13,
    1.0: 18, 0.667: 14, 0.333: 9, 0.0: 5, -0.333: 10, -0.667: 6, -1.0: 1, -1.333: 31,
    -1.667: 2, -2.0: 28, -2.333: 27, -2.667: 23, -3.0: 24, -3.333: 20, -3.667: 19, -4.0: 15,
    -4.667: 16, -5.333: 12, -6.148: 11, -7.254: 8, -8.843: 7, -11.31: 4, -15.639: 3, -25.0: 0,
}  # fmt: skip

# tier4/nebula @ 606ac41f1f136333915f0114736f2f828e9d2789: channel, Elevation (deg), Azimuth
# (deg) of src/nebula_hesai/nebula_hesai_decoders/calibration/Pandar64.csv, and
# Pandar64::firing_time_offset_ns[channel - 1] of .../decoders/pandar_64.hpp (ns before the
# block's end).
PANDAR64 = """
1, 14.9, -1.042, -23180
2, 11.05, -1.042, -21876
3, 8.077, -1.042, -20572
4, 5.075, -1.042, -19268
5, 3.058, -1.042, -17964
6, 2.046, -1.042, -16660
7, 1.878, 1.042, -11444
8, 1.706, 3.125, -46796
9, 1.54, 5.208, -7532
10, 1.369, -5.208, -36956
11, 1.202, -3.125, -50732
12, 1.031, -1.042, -54668
13, 0.864, 1.042, -40892
14, 0.693, 3.125, -44828
15, 0.526, 5.208, -31052
16, 0.355, -5.208, -34988
17, 0.187, -3.125, -48764
18, 0.018, -1.042, -52700
19, -0.151, 1.042, -38924
20, -0.319, 3.125, -42860
21, -0.49, 5.208, -29084
22, -0.657, -5.208, -33020
23, -0.827, -3.125, -46796
24, -0.995, -1.042, -25148
25, -1.166, 1.042, -36956
26, -1.333, 3.125, -50732
27, -1.504, 5.208, -27116
28, -1.67, -5.208, -40892
29, -1.842, -3.125, -44828
30, -2.01, -1.042, -31052
31, -2.18, 1.042, -34988
32, -2.347, 3.125, -48764
33, -2.518, 5.208, -25148
34, -2.682, -5.208, -38924
35, -2.855, -3.125, -42860
36, -3.022, -1.042, -29084
37, -3.192, 1.042, -33020
38, -3.357, 3.125, -52700
39, -3.53, 5.208, -6228
40, -3.694, -5.208, -54668
41, -3.866, -3.125, -15356
42, -4.032, -1.042, -27116
43, -4.203, 1.042, -10140
44, -4.367, 3.125, -23180
45, -4.54, 5.208, -4924
46, -4.702, -5.208, -21876
47, -4.874, -3.125, -14052
48, -5.039, -1.042, -17964
49, -5.211, 1.042, -8836
50, -5.373, 3.125, -19268
51, -5.547, 5.208, -3620
52, -5.708, -5.208, -20572
53, -5.88, -3.125, -12748
54, -6.043, -1.042, -16660
55, -7.045, -1.042, -7532
56, -8.041, -1.042, -11444
57, -9.042, -1.042, -6228
58, -10.027, -1.042, -15356
59, -11.014, -1.042, -10140
60, -11.988, -1.042, -4924
61, -12.956, -1.042, -3620
62, -13.912, -1.042, -14052
63, -18.871, -1.042, -8836
64, -24.879, -1.042, -12748
"""

# tier4/nebula @ 606ac41f1f136333915f0114736f2f828e9d2789, calibration/PandarXT32.csv:
# channel, Elevation (deg), Azimuth (deg).
PANDAR_XT32 = """
1, 14.972363, 0.082385
2, 13.952372, 0.076529
3, 12.938632, 0.078240
4, 11.931141, 0.076267
5, 10.926151, 0.064337
6, 9.922410, 0.059942
7, 8.917419, 0.049319
8, 7.917429, 0.044992
9, 6.919938, 0.034446
10, 5.919947, 0.027658
11, 4.922456, 0.020896
12, 3.924965, 0.014147
13, 2.929974, 0.008668
14, 1.936233, -0.000548
15, 0.944992, -0.007248
16, -0.047500, -0.015201
17, -1.039991, -0.025654
18, -2.036232, -0.031126
19, -3.028723, -0.037837
20, -4.024964, -0.045822
21, -5.019955, -0.061312
22, -6.016196, -0.065570
23, -7.013687, -0.068599
24, -8.013678, -0.076658
25, -9.011169, -0.088476
26, -10.011159, -0.091580
27, -11.006150, -0.098438
28, -12.003641, -0.092837
29, -12.996131, -0.102247
30, -13.997372, -0.104231
31, -15.004862, -0.118783
32, -16.023602, -0.129679
"""

# HesaiTechnology/HesaiLidar_SDK_2.0 @ ea7f86fad62fe53c947bd9f29f9216be5bae7b1d: channel,
# Elevation (deg), Azimuth (deg) of correction/angle_correction/Pandar128E3X_Angle Correction
# File.csv; firing time (ns) of correction/firetime_correction/Pandar128E3X_Firetime Correction
# File.csv, operation mode 2 (Standard), far field (distance >= 2.85 m), azimuth state 0, then
# azimuth state 1.
PANDAR128 = """
1, 14.436, 3.257, 4436, 4436
2, 13.535, 3.263, 28554, 28554
3, 13.081786, 1.091414, 776, 776
4, 12.624, 3.268, 2431, 2781
5, 12.165246, 1.092504, 4436, 4436
6, 11.702, 3.273, 30559, 30209
7, 11.238522, 1.093621, 6441, 6091
8, 10.771, 3.278, 32564, 31864
9, 10.305007, 1.094766, 34219, 33869
10, 9.83, 3.283, 776, 776
11, 9.356123, 1.095941, 2431, 2781
12, 8.88, 3.288, 6441, 6091
13, 8.401321, 1.097146, 28554, 28554
14, 7.921, 3.291, 34219, 33869
15, 7.43808, 1.098384, 30559, 30209
16, 6.952581, -1.101114, 28554, 28554
17, 6.466905, 1.099655, 32564, 31864
18, 5.977753, -1.103649, 6441, 6091
19, 5.487, -3.306, 32564, 31864
20, 4.995801, -1.106118, 776, 776
21, 4.501, -3.311, 2431, 2781
22, 4.007293, -1.108519, 30559, 30209
23, 3.509, -3.318, 34219, 33869
24, 3.012822, -1.110852, 32564, 31864
25, 2.512, -3.324, 4436, 4436
26, 2.013, -1.113115, 38509, 37809
27, 1.885, 7.72, 43079, 42379
28, 1.761, 5.535, 12666, 12666
29, 1.637, 3.325, 43079, 42379
30, 1.511, -3.33, 19521, 19521
31, 1.385875, 1.10673, 19521, 19521
32, 1.2582, -5.538034933, 36224, 35524
33, 1.13, -7.726107248, 12666, 12666
34, 1.008459, -1.115309, 12666, 12666
35, 0.88, 7.731, 38509, 37809
36, 0.756, 5.543, 52219, 51519
37, 0.63, 3.329, 17236, 17236
38, 0.505, -3.336, 52219, 51519
39, 0.378591, 1.108227, 43079, 42379
40, 0.251, -5.546813133, 43079, 42379
41, 0.124, -7.738214933, 19521, 19521
42, -0.00015, -1.117431, 17236, 17236
43, -0.129, 7.743, 12666, 12666
44, -0.2541, 5.550783, 21806, 21806
45, -0.38, 3.335, 36224, 35524
46, -0.5061259, -3.341759, 21806, 21806
47, -0.63235, 1.109762, 38509, 37809
48, -0.7597898, -5.555361, 38509, 37809
49, -0.8872418, -7.750039, 21806, 21806
50, -1.012168, -1.119482, 36224, 35524
51, -1.141, 7.757, 36224, 35524
52, -1.2662, 5.559905, 19521, 19521
53, -1.393, 3.34, 12666, 12666
54, -1.519337, -3.347338, 12666, 12666
55, -1.646275, 1.111338, 52219, 51519
56, -1.773301, -5.564415, 52219, 51519
57, -1.900587, -7.762486, 17236, 17236
58, -2.026912, -1.12146, 21806, 21806
59, -2.155, 7.768, 17236, 17236
60, -2.2815, 5.568891, 43079, 42379
61, -2.409, 3.345, 38509, 37809
62, -2.534932, -3.352812, 43079, 42379
63, -2.662501, 1.112953, 17236, 17236
64, -2.789024, -5.573332, 17236, 17236
65, -2.916055, -7.774765, 36224, 35524
66, -3.043698, -1.123366, 19521, 19521
67, -3.172, 7.78, 19521, 19521
68, -3.299, 5.577739, 38509, 37809
69, -3.425, 3.351, 52219, 51519
70, -3.552222, -3.358181, 38509, 37809
71, -3.680335, 1.114609, 21806, 21806
72, -3.806265, -5.582111, 12666, 12666
73, -3.932954, -7.786874, 38509, 37809
74, -4.06183, -1.125199, 43079, 42379
75, -4.19, 7.792, 21806, 21806
76, -4.318, 5.586449, 36224, 35524
77, -4.444, 3.356, 19521, 19521
78, -4.570508, -3.363443, 17236, 17236
79, -4.699079, 1.116305, 36224, 35524
80, -4.824327, -5.590751, 19521, 19521
81, -4.950584, -7.798811, 52219, 51519
82, -5.080608, -1.126958, 52219, 51519
83, -5.209, 7.804, 52219, 51519
84, -5.336, 5.595019, 17236, 17236
85, -5.463, 3.36, 21806, 21806
86, -5.589088, -3.368599, 36224, 35524
87, -5.718031, 1.118042, 12666, 12666
88, -5.842508, -5.599251, 21806, 21806
89, -5.968246, -7.810576, 43079, 42379
90, -6.099661, -1.128643, 2431, 2781
91, -6.607262, -3.373647, 776, 776
92, -7.117295, -1.130255, 4436, 4436
93, -7.624327, -3.378587, 6441, 6091
94, -8.133802, -1.131792, 34219, 33869
95, -8.639587, -3.383419, 30559, 30209
96, -9.149, 3.381, 776, 776
97, -9.652353, -3.388143, 28554, 28554
98, -10.16, 3.386, 2431, 2781
99, -10.665443, 1.127077, 2431, 2781
100, -11.17, 3.39, 4436, 4436
101, -11.671568, 1.129045, 32564, 31864
102, -12.174, 3.395, 28554, 28554
103, -12.673194, 1.131048, 30559, 30209
104, -13.173, 3.401, 6441, 6091
105, -13.669682, 1.133088, 4436, 4436
106, -14.166, 3.406, 30559, 30209
107, -14.660411, 1.135163, 28554, 28554
108, -15.154, 3.41, 32564, 31864
109, -15.644783, 1.137272, 6441, 6091
110, -16.135, 3.416, 34219, 33869
111, -16.622221, 1.139412, 34219, 33869
112, -17.106088, -1.142319, 32564, 31864
113, -17.592171, 1.141584, 776, 776
114, -18.071976, -1.143128, 4436, 4436
115, -18.54765, -3.425708, 32564, 31864
116, -19.029597, -1.143867, 2431, 2781
117, -19.50071, -3.429329, 30559, 30209
118, -19.978461, -1.144538, 34219, 33869
119, -20.44479, -3.432841, 776, 776
120, -20.918108, -1.14514, 28554, 28554
121, -21.37943, -3.436242, 4436, 4436
122, -21.848107, -1.145675, 6441, 6091
123, -22.30422, -3.439533, 34219, 33869
124, -22.768055, -1.146145, 30559, 30209
125, -23.21878, -3.442714, 2431, 2781
126, -23.677577, -1.146549, 776, 776
127, -24.12274, -3.445786, 6441, 6091
128, -25.01577, -3.448749, 28554, 28554
"""


def _rows(text: str) -> list[list[float]]:
    return [[float(v) for v in line.split(",")] for line in text.strip().splitlines()]


def _velodyne_tables(text: str) -> tuple[list[float], list[float]]:
    """Elevations and azimuth offsets, degrees, from a Velodyne calibration table."""
    rows = _rows(text)
    assert [int(r[0]) for r in rows] == list(range(len(rows)))
    return (
        [round(math.degrees(r[1]), 6) for r in rows],
        [round(math.degrees(r[2]), 6) for r in rows],
    )


def _hesai_tables(text: str) -> tuple[list[float], list[float]]:
    """Elevations and (counter-clockwise) azimuth offsets, degrees, from a Hesai table."""
    rows = _rows(text)
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    return [r[1] for r in rows], [-r[2] for r in rows]


def _vertical_fov_deg(pattern: SpinningPattern) -> float:
    """Vertical FOV of one firing of every channel, from the generated schedule."""
    el = np.degrees(pattern.schedule(0, pattern.channels).elevation_rad)
    return float(el.max() - el.min())


def _check_schedule(s: ScannerConfig, pattern: SpinningPattern) -> None:
    """The schedule applies the offsets: azimuth = head azimuth at the firing + offset."""
    n = pattern.channels
    sched = pattern.schedule(0, 3 * n)
    sign = -1.0 if s.rotation == "clockwise" else 1.0
    head = math.radians(s.start_azimuth_deg) + sign * 2 * math.pi * s.rotation_hz * sched.time_s
    offsets = np.radians(np.tile(np.asarray(s.channels.azimuth_offset_deg or [0.0] * n), 3))
    diff = np.angle(np.exp(1j * (sched.azimuth_rad - head - offsets)))
    np.testing.assert_allclose(diff, 0.0, atol=1e-9)
    fired = np.asarray(s.channels.firing_offset_us or [0.0] * n)
    np.testing.assert_allclose(sched.time_s[:n] * 1e6, fired, atol=1e-6)
    assert max(fired) < s.firing_period_s * 1e6  # every firing inside its cycle


def test_vlp16_preset_matches_vlp16db_and_the_manual() -> None:
    s = load_scanner("vlp-16")
    p = pattern_for(s)
    el, rot = _velodyne_tables(VLP16_DB)
    assert s.channels.count == 16
    assert s.channels.elevation_deg == el
    # VLP-16 User Manual 63-9243 Rev D, Table 9-1: the same angles, in firing order.
    assert el == [-15, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15]
    assert rot == [0.0] * 16 and s.channels.azimuth_offset_deg is None
    # Manual 9.4 / rawdata.cc buildTimings: laser k at k x 2.304 us.
    assert s.channels.firing_offset_us == pytest.approx([2.304 * k for k in range(16)], abs=1e-9)
    # Manual 8.1: 16 lasers per 55.296 us = 289,352 points/s; 1808 whole cycles a turn: -0.03 %.
    assert p.pulses_per_second == pytest.approx(16 / 55.296e-6, rel=5e-4)
    assert _vertical_fov_deg(p) == pytest.approx(30.0, abs=1e-9)  # manual: +-15 deg
    assert s.range_min_m == 0.4  # VLP16_points.launch min_range
    _check_schedule(s, p)


def test_hdl32e_preset_matches_32db_and_the_manual() -> None:
    s = load_scanner("hdl-32e")
    p = pattern_for(s)
    el, rot = _velodyne_tables(HDL32E_DB)
    assert s.channels.count == 32
    assert s.channels.elevation_deg == el
    manual = [r[3] for r in _rows(HDL32E_DB)]
    np.testing.assert_allclose(el, manual, atol=0.0101)  # the manual prints 2 decimals
    assert rot == [0.0] * 32 and s.channels.azimuth_offset_deg is None
    # Manual Appendix E: DSR k fires k x 1.152 us into its 46.08 us cycle.
    assert s.channels.firing_offset_us == pytest.approx([1.152 * k for k in range(32)], abs=1e-9)
    # 32 points / 46.08 us = 694,444 points/s (2170 whole cycles a turn: -0.006 %); VeloView's
    # README: "HDL-32E: ~700,000pt/sec".
    assert p.pulses_per_second == pytest.approx(32 / 46.08e-6, rel=1e-4)
    assert p.pulses_per_second == pytest.approx(700_000, rel=0.01)
    assert _vertical_fov_deg(p) == pytest.approx(41.3, abs=0.05)  # manual: 41.3 deg vertical FOV
    _check_schedule(s, p)


def test_hdl64e_preset_matches_64e_utexas_and_veloview_timing() -> None:
    s = load_scanner("hdl-64e")
    p = pattern_for(s)
    el, rot = _velodyne_tables(HDL64E_DB)
    assert s.channels.count == 64
    assert s.channels.elevation_deg == el
    assert s.channels.azimuth_offset_deg == rot  # +degrees(rot_correction)
    assert (min(rot), max(rot)) == (-8.0, 10.0)
    # Kitware/VeloView @ 01a2ebc1d4c4971574cdb11b6bca317c07f1d47b, LidarPlugin/IO/Lidar/Velodyne/
    # vtkVelodyneLegacyPacketInterpreter.cxx, HDL64EAdjustTimeStamp (single return): a laser
    # fires TimeOffsetMicroSec[r % 4] + (r / 4) x 6.0 us before its pair's reference, with
    # r = 31 - dsr; upper/lower firing pairs every 48.0 us.
    time_offset_us, pair_us = (2.34, 3.54, 4.74, 6.0), 48.0
    before = [time_offset_us[(31 - k) % 4] + ((31 - k) // 4) * 6.0 for k in range(32)]
    expected = [pair_us - b for b in before]
    fired = s.channels.firing_offset_us
    assert fired[:32] == pytest.approx(expected, abs=1e-9)
    assert fired[32:] == fired[:32]  # S3 manual: laser 32 fires with laser 0, 33 with 1, ...
    # 64 lasers / 48 us = 1,333,333 points/s (2083 whole cycles a turn: -0.016 %); VeloView's
    # README: "HDL-64E: ~1.3Million pt/sec".
    assert p.pulses_per_second == pytest.approx(64 / 48e-6, rel=2e-4)
    assert p.pulses_per_second == pytest.approx(1.3e6, rel=0.03)
    # Commonly quoted +2.0 to -24.9 deg (26.9 deg; VeloView's README: 26 deg); this unit 26.73.
    assert _vertical_fov_deg(p) == pytest.approx(26.9, abs=0.2)
    _check_schedule(s, p)


def test_vlp32c_preset_matches_veloview_calibration_and_the_manual() -> None:
    s = load_scanner("vlp-32c")
    p = pattern_for(s)
    el, rot = _velodyne_tables(VLP32C_DB)
    assert s.channels.count == 32
    assert s.channels.elevation_deg == el
    for elevation, laser in VLP32C_MANUAL_ELEVATION_TO_LASER.items():
        assert s.channels.elevation_deg[laser] == elevation
    assert s.channels.azimuth_offset_deg == rot  # +degrees(rot_correction)
    assert sorted(set(rot)) == [-4.2, -1.4, 1.4, 4.2]  # the manual's four columns
    # Manual 9.4: lasers fire in pairs, 0 and 1 first, every 2.304 us.
    assert s.channels.firing_offset_us == pytest.approx(
        [2.304 * (k // 2) for k in range(32)], abs=1e-9
    )
    # Manual 8.2.4: 578,688 points/s single return (1808 whole cycles a turn: -0.02 %).
    assert p.pulses_per_second == pytest.approx(578_688, rel=5e-4)
    assert _vertical_fov_deg(p) == pytest.approx(40.0, abs=1e-9)  # manual: +15 to -25 deg
    _check_schedule(s, p)


def test_vls128_preset_matches_the_calibration_timing_and_manual() -> None:
    """VLS128.yaml of VELODYNE (numbers checked, not copied: the preset's header cites it);
    the firing groups of its rawdata.cc / nebula's vls128_decoder.cpp; the VLS-128 manual."""
    s = load_scanner("vls-128")
    p = pattern_for(s)
    el = np.asarray(s.channels.elevation_deg)
    assert s.channels.count == 128
    assert len(set(el.tolist())) == 128 and np.diff(np.sort(el)).min() == pytest.approx(0.11)
    assert (el[36], el[59], el[82]) == (-25.0, 15.0, -5.4)  # bottom, top; laser 82 (see real frame)
    # rot_correction: eight values, one per position in a firing group of eight (manual 9.3.1.2)
    az = s.channels.azimuth_offset_deg
    column = [-6.354, -4.548, -2.732, -0.911, 0.911, 2.732, 4.548, 6.354]
    assert az == [column[k % 8] for k in range(128)]
    # group g = laser // 8 fires at (g + g // 8) x 2.665 us (a maintenance slot after group 7)
    assert s.channels.firing_offset_us == pytest.approx(
        [2.665 * (k // 8 + k // 64) for k in range(128)], abs=1e-9
    )
    assert max(s.channels.firing_offset_us) == pytest.approx(42.64)  # within the 53.3 us sequence
    # Manual 8.2.4: 2,401,497.6 points/s single return (1876 whole sequences a turn: -0.009 %).
    assert p.pulses_per_second == pytest.approx(2_401_497.6, rel=1e-4)
    assert 1 / (s.rotation_hz * s.firings_per_revolution) == pytest.approx(53.3e-6, rel=1e-4)
    assert _vertical_fov_deg(p) == pytest.approx(40.0, abs=1e-9)  # +15 to -25 deg
    assert (s.wavelength_nm, s.range_resolution_m) == (903.0, 0.004)  # manual 9.3.1.2, 9.3.1.3
    assert (s.divergence_mrad.horizontal, s.divergence_mrad.vertical) == (3.0, 1.5)  # Table F-1
    _check_schedule(s, p)


def test_pandar64_preset_matches_nebula() -> None:
    s = load_scanner("pandar64")
    p = pattern_for(s)
    el, az = _hesai_tables(PANDAR64)
    assert s.channels.count == 64
    assert s.channels.elevation_deg == el
    assert s.channels.azimuth_offset_deg == az  # -Azimuth
    assert sorted(set(az)) == [-5.208, -3.125, -1.042, 1.042, 3.125, 5.208]
    before_end_us = [-r[3] / 1000 for r in _rows(PANDAR64)]
    assert (min(before_end_us), max(before_end_us)) == (3.62, 54.668)
    # Counted from the previous block's end (55.56 us blocks, pandar_64.hpp and the manual).
    assert s.channels.firing_offset_us == pytest.approx(
        [55.56 - b for b in before_end_us], abs=1e-9
    )
    # 64 channels per 55.56 us block, 18,000 blocks/s at 10 Hz: 1,152,000 points/s (computed
    # from the block period; no datasheet figure was found to compare with).
    assert p.pulses_per_second == pytest.approx(1_152_000, rel=1e-9)
    # nebula's Pandar64 FOV -25 .. +15 deg (40 deg); this unit 39.78.
    assert _vertical_fov_deg(p) == pytest.approx(40.0, abs=0.25)
    _check_schedule(s, p)


def test_pandar_xt32_preset_matches_nebula() -> None:
    s = load_scanner("pandar-xt32")
    p = pattern_for(s)
    el, az = _hesai_tables(PANDAR_XT32)
    assert s.channels.count == 32
    assert s.channels.elevation_deg == el
    assert s.channels.azimuth_offset_deg == az  # -Azimuth
    # pandar_xt32.hpp: channel_offset_ns = 368 + 1512 * channel_id.
    assert s.channels.firing_offset_us == pytest.approx(
        [(368 + 1512 * c) / 1000 for c in range(32)], abs=1e-9
    )
    # 32 channels per 50 us block: 640,000 points/s (the quoted single-return figure; no
    # primary datasheet found).
    assert p.pulses_per_second == pytest.approx(640_000, rel=1e-9)
    assert _vertical_fov_deg(p) == pytest.approx(31.0, abs=0.01)  # design +15 to -16 deg
    _check_schedule(s, p)


def test_pandar128_preset_matches_the_sdk_tables() -> None:
    s = load_scanner("pandar128")
    p = pattern_for(s)
    el, az = _hesai_tables(PANDAR128)
    assert s.channels.count == 128
    assert s.channels.elevation_deg == el
    assert s.channels.azimuth_offset_deg == az  # -Azimuth
    rows = _rows(PANDAR128)
    assert s.channels.firing_offset_us == pytest.approx([r[3] / 1000 for r in rows], abs=1e-9)
    # The alternate blocks' azimuth state 1 differs by at most 0.7 us (not modelled).
    assert max(abs(r[3] - r[4]) for r in rows) == 700
    # Standard mode: 128 channels per 2 x 27.778 us block (manual): 2,304,000 points/s at 10 Hz
    # (computed from the block period; no datasheet figure was found to compare with).
    assert p.pulses_per_second == pytest.approx(128 / 55.556e-6, rel=1e-4)
    # Commonly quoted -25 to +15 deg (40 deg); nebula's decoder FOV -25 .. +14.4; this unit 39.45.
    assert _vertical_fov_deg(p) == pytest.approx(40.0, abs=0.6)
    elevation = np.degrees(p.schedule(0, 128).elevation_rad)
    assert elevation.min() >= -25.05 and elevation.max() <= 14.45
    _check_schedule(s, p)


@pytest.mark.parametrize("theta_deg", [0.0, 37.5, 181.25, 359.99])
def test_velodyne_rot_correction_sign(theta_deg: float) -> None:
    """rawdata.cc: x = d sin(theta - r), y = d cos(theta - r), published as (y, -x); the
    preset's clockwise head at -theta plus +degrees(r) gives the same azimuth."""
    for name, table in (("hdl-64e", HDL64E_DB), ("vlp-32c", VLP32C_DB)):
        s = load_scanner(name)
        for (_, _, r), offset in zip(_rows(table), s.channels.azimuth_offset_deg, strict=True):
            t = math.radians(theta_deg)
            x, y = math.sin(t - r), math.cos(t - r)
            driver = math.atan2(-x, y)  # the ROS point (y, -x)
            preset = -t + math.radians(offset)  # clockwise: head azimuth -theta
            assert math.remainder(driver - preset, 2 * math.pi) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("block_deg", [0.0, 90.0, 200.5, 359.9])
def test_hesai_azimuth_sign(block_deg: float) -> None:
    """nebula hesai_decoder.hpp: psi = block azimuth + Azimuth, x = d sin(psi), y = d cos(psi)
    with y forward and x right; forward-left azimuth atan2(-x, y) = -psi."""
    for name, table in (
        ("pandar64", PANDAR64),
        ("pandar-xt32", PANDAR_XT32),
        ("pandar128", PANDAR128),
    ):
        s = load_scanner(name)
        for row, offset in zip(_rows(table), s.channels.azimuth_offset_deg, strict=True):
            psi = math.radians(block_deg + row[2])
            driver = math.atan2(-math.sin(psi), math.cos(psi))
            preset = -math.radians(block_deg) + math.radians(offset)
            assert math.remainder(driver - preset, 2 * math.pi) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "name",
    ["vlp-16", "hdl-32e", "hdl-64e", "vlp-32c", "vls-128", "pandar64", "pandar-xt32", "pandar128"],
)
def test_reflectivity_byte(name: str) -> None:
    """Calibrated reflectivity 0-255, diffuse 0-100: whole steps, 100 for reflectance 1."""
    s = load_scanner(name)
    assert (s.intensity_scale, s.intensity_max, s.intensity_step) == (100.0, 255.0, 1.0)
    assert s.rotation == "clockwise"
