/*
 * The RP2350 bootrom boots only an image that carries a valid IMAGE_DEF block in its first 4 KB of
 * Flash (RP2350 datasheet 5.9.5.1, "Minimum viable image metadata"). This is that minimum: one
 * IMAGE_TYPE item (executable, Arm, Secure, RP2350) and no entry-point item, so the bootrom starts
 * the image through its vector table. sections.ld places it right after the vector table.
 */
#include <stdint.h>

#define PICOBIN_BLOCK_MARKER_START 0xFFFFDED3u
#define PICOBIN_BLOCK_MARKER_END 0xAB123579u
/* item 0x42 (IMAGE_TYPE), 1 word: flags 0x1021 = EXE (0x1) | Secure (0x20) | Arm (0x000) | RP2350 (0x1000) */
#define IMAGE_TYPE_EXE_ARM_SECURE_RP2350 0x10210142u
#define ITEM_LAST_SIZE_1 0x000001FFu /* item 0xFF (LAST), the block's items total 1 word */
#define LINK_TO_SELF 0u              /* no further block in the loop */

__attribute__((section(".picobin_block"), used)) const uint32_t mcubert_rp2350_image_def[5] = {
    PICOBIN_BLOCK_MARKER_START, IMAGE_TYPE_EXE_ARM_SECURE_RP2350, ITEM_LAST_SIZE_1, LINK_TO_SELF,
    PICOBIN_BLOCK_MARKER_END,
};
